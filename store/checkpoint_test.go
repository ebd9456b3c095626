package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"switchyard/store/storetest"
	"switchyard/testwait"
)

func TestCheckpointer(t *testing.T) {
	t.Parallel()
	storetest.SQLiteOnly(t, "the WAL and its checkpoints are SQLite's; PostgreSQL has no such file")
	db := storetest.New(t)
	ctx := context.Background()

	t.Run("commits reach the database file before the WAL has 1,000 pages", func(t *testing.T) {
		if _, err := db.Write.ExecContext(ctx, `create table ckpt (id integer primary key, body blob not null)`); err != nil {
			t.Fatal(err)
		}
		size := func() int64 {
			st, err := os.Stat(db.Path())
			if err != nil {
				t.Fatal(err)
			}
			return st.Size()
		}
		before := size()
		// 200 commits of a page each: a fifth of what makes SQLite's own
		// checkpoint run, inside the commit that crosses it.
		const commits, page = 200, 4096
		body := make([]byte, page)
		for i := range commits {
			if err := db.Tx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`insert into ckpt (id, body) values (?, ?)`, i, body)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 30*time.Second, "the commits copied into the database file", func() bool {
			return size()-before >= commits*page
		}, func() string {
			return fmt.Sprintf("the file grew by %d bytes", size()-before)
		})
	})
}
