package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"switchyard/store/storetest"
)

func TestDamagedDatabase(t *testing.T) {
	t.Parallel()
	storetest.SQLiteOnly(t, "it damages the file, checks it and serves an empty file; TestPostgresRefusesBackupAndCheck is PostgreSQL's")
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	if out, err := exec.Command(binary(t), "migrate", "--db", good).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}

	t.Run("check passes a sound file", func(t *testing.T) {
		out, err := exec.Command(binary(t), "check", "--db", good).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok: no faults") {
			t.Fatalf("check on a sound file: %v\n%s", err, out)
		}
	})

	bad := filepath.Join(dir, "bad.db")
	if out, err := exec.Command(binary(t), "migrate", "--db", bad).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	storetest.DamageIndex(t, bad, "idx_bot_event_outbox_processed_id")

	t.Run("check finds the damage and fails", func(t *testing.T) {
		for _, args := range [][]string{{"check", "--db", bad}, {"check", "--quick", "--db", bad}} {
			out, err := exec.Command(binary(t), args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "damaged") || !strings.Contains(string(out), "backup") {
				t.Fatalf("%v on a damaged file: err %v\n%s", args, err, out)
			}
		}
	})

	t.Run("serve refuses a damaged file and says what to do", func(t *testing.T) {
		cmd := exec.Command(binary(t), "serve", "--db", bad, "--addr", "127.0.0.1:0")
		out, err := cmd.CombinedOutput() // it must exit by itself
		if err == nil || strings.Contains(string(out), "running at") || !strings.Contains(string(out), "restore the latest backup") {
			t.Fatalf("serve on a damaged file: err %v\n%s", err, out)
		}
	})

	t.Run("serve refuses an existing empty file", func(t *testing.T) {
		empty := filepath.Join(dir, "empty.db")
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(binary(t), "serve", "--db", empty, "--addr", "127.0.0.1:0").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "0 bytes") {
			t.Fatalf("serve on an empty file: err %v\n%s", err, out)
		}
	})
}
