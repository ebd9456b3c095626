package connlimit

import "testing"

func TestFit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max   int
		limit uint64
		want  int
	}{
		{1024, 1 << 20, 1024},
		{1024, 1024 + Reserve, 1024},
		{1024, 1024, 1024 - Reserve},
		{1024, 200, 100},
		{1024, 1, 1},
		{10, 100, 10},
		{10, 1000, 10},
	} {
		if got := fit(c.max, c.limit); got != c.want {
			t.Errorf("fit(%d, %d) = %d, want %d", c.max, c.limit, got, c.want)
		}
	}
	if n, limit := Fit(64); limit != 0 && n != fit(64, limit) {
		t.Errorf("Fit(64) = %d under a limit of %d", n, limit)
	}
}
