package storetest

import (
	"context"
	"os"
	"testing"

	"switchyard/store"
)

// DamageIndex overwrites the root page of index in the database file at path
// with garbage, as a bad disk or a torn copy would. The database must not be
// open elsewhere; it is checkpointed first so the index lives in the file.
func DamageIndex(t testing.TB, path, index string) {
	t.Helper()
	SQLiteOnly(t, "it damages SQLite's file format; PostgreSQL's pages are the server's")
	db, err := store.Open(context.Background(), store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var root, pageSize int64
	if err := db.Read.QueryRow(`select rootpage from sqlite_master where name = ?`, index).Scan(&root); err != nil {
		t.Fatalf("root page of %s: %v", index, err)
	}
	if err := db.Read.QueryRow(`pragma page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write.Exec(`pragma wal_checkpoint(truncate)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	garbage := make([]byte, pageSize)
	for i := range garbage {
		garbage[i] = byte(i*13 + 5)
	}
	if _, err := f.WriteAt(garbage, (root-1)*pageSize); err != nil {
		t.Fatal(err)
	}
}
