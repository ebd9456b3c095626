// Package testwait is how Switchyard's tests wait for something to happen:
// they poll a condition until it holds or a deadline passes (Until), never
// sleep a guessed time, and read what a running app logged (Buffer). It is
// the one such helper of the project's tests.
package testwait

import (
	"strings"
	"testing"
	"time"
)

// Slack stretches every deadline: CI runs every package's tests at once, with
// -race, on two cores, and a wait that passes returns as soon as its
// condition holds, so a generous deadline costs nothing. A test states the
// time a thing should take on an idle machine; Until allows Slack times it.
const Slack = 3

// Every is how often Until checks its condition.
const Every = 5 * time.Millisecond

// Until checks cond every few milliseconds until it holds, and fails the
// test if it still does not after within×Slack, naming what it waited for
// and, when describe is given, what describe says of the state at the
// deadline (what may then be "", when describe says it all).
func Until(t testing.TB, within time.Duration, what string, cond func() bool, describe ...func() string) {
	t.Helper()
	deadline := time.Now().Add(within * Slack)
	tick := time.NewTicker(Every)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			said := []string{}
			if what != "" {
				said = append(said, what)
			}
			for _, d := range describe {
				said = append(said, d())
			}
			t.Fatalf("not within %s: %s", within*Slack, strings.Join(said, "; "))
			return
		}
		<-tick.C
	}
}
