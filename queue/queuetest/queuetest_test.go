package queuetest_test

import (
	"context"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/queue/queuetest"
	"switchyard/store/storetest"
)

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	t.Run("seeded dead letters are counted and listed, oldest death first, as the admin reads them", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		start := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
		ids, err := queuetest.SeedDead(t.Context(), db, queuetest.DeadOpts{Queue: "seed.failing", N: 1_234, Start: start}) // more than one batch
		if err != nil {
			t.Fatal(err)
		}
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		st, err := admin.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Queues) != 1 || st.Queues[0].Name != "seed.failing" || st.Queues[0].Dead != 1_234 {
			t.Fatalf("queues %+v, want seed.failing with 1234 dead letters", st.Queues)
		}
		dead, err := admin.ListDead(context.Background(), queue.DeadFilter{Queue: "seed.failing", Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 2 || dead[0].ID != ids[0] || !dead[1].DeadAt.Equal(start.Add(time.Millisecond)) || len(dead[0].Body) == 0 {
			t.Fatalf("dead letters %+v, want %s first, a millisecond apart", dead, ids[0])
		}
	})
}
