package loadtest_test

import (
	"testing"

	"switchyard/loadtest"
)

func TestTopicPlan(t *testing.T) {
	t.Parallel()
	const run, requests = 42, 400
	perUser := map[string][]int64{}
	follows := 0
	for n := int64(1); n <= requests; n++ {
		r := loadtest.TopicPlan(run, n)
		perUser[r.User] = append(perUser[r.User], n)
		if r.Follows == 0 {
			if r.Version != 1 || (r.Link == loadtest.LinkFirst) != (n%2 == 0) || r.Link == loadtest.LinkSecond {
				t.Errorf("request %d: a new user %+v, want version 1, the first link when n is even and none otherwise", n, r)
			}
			continue
		}
		follows++
		first := loadtest.TopicPlan(run, r.Follows)
		if r.Follows >= n || first.User != r.User || first.Version != 1 || first.Link != loadtest.LinkFirst || r.Version != 2 || r.Link != loadtest.LinkSecond {
			t.Errorf("request %d: follow-up %+v of request %d %+v, want version 2 through the second link after version 1 through the first", n, r, r.Follows, first)
		}
	}
	for user, ns := range perUser {
		if len(ns) > 2 {
			t.Errorf("user %s is published by requests %v, want at most a first snapshot and its follow-up", user, ns)
		}
	}
	if follows < requests/5 {
		t.Errorf("%d follow-ups in %d requests, want about one in four", follows, requests)
	}
	if loadtest.LinkOwner(run, loadtest.LinkFirst) == loadtest.LinkOwner(run, loadtest.LinkSecond) || perUser[loadtest.LinkOwner(run, loadtest.LinkFirst)] != nil {
		t.Error("the links' owners are not two users of their own")
	}
}
