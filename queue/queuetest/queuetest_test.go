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
		newest := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
		queuetest.DeadLetters(t, db, "seed.failing", "m_seed", 1_234, newest) // more than one batch
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
		if len(dead) != 2 || dead[0].ID != "m_seed0" || !dead[1].DeadAt.Equal(newest.Add(-1232*time.Second)) || len(dead[0].Body) == 0 {
			t.Fatalf("dead letters %+v, want m_seed0 first, a second apart", dead)
		}
	})
}
