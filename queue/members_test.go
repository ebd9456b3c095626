package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// groupModel is a group's lease table in memory: who holds each partition
// ("" for free), and the members, for running balance without a database.
type groupModel struct {
	owner   []string
	members []string
}

func (g *groupModel) view() groupView {
	return groupView{owner: slices.Clone(g.owner), members: slices.Sorted(slices.Values(g.members))}
}

func (g *groupModel) mine(m string) []int {
	var ps []int
	for p, o := range g.owner {
		if o == m {
			ps = append(ps, p)
		}
	}
	return ps
}

// step lets member m look at the table and act on what balance says, as a
// subscriber does: hand over, then take what is still free. It reports
// whether anything changed.
func (g *groupModel) step(m string) bool {
	a := balance(g.view(), m, g.mine(m))
	changed := false
	for _, p := range a.release {
		g.owner[p], changed = "", true
	}
	held := len(g.mine(m))
	for _, p := range a.take {
		if held >= a.quota {
			break
		}
		if g.owner[p] == "" {
			g.owner[p], held, changed = m, held+1, true
		}
	}
	return changed
}

// settle runs rounds of every member acting, in a random order each round,
// until a round changes nothing, and returns how many rounds that took.
func (g *groupModel) settle(t *testing.T, rng *rand.Rand) int {
	t.Helper()
	for round := 1; round <= 20; round++ {
		changed := false
		for _, i := range rng.Perm(len(g.members)) {
			if g.step(g.members[i]) {
				changed = true
			}
		}
		if !changed {
			return round
		}
	}
	t.Fatalf("no stable assignment after 20 rounds: %v", g.owner)
	return 0
}

// checkBalanced fails unless every partition is held and each member holds
// its share: ⌈P/N⌉ or ⌊P/N⌋, never more.
func (g *groupModel) checkBalanced(t *testing.T) {
	t.Helper()
	n, p := len(g.members), len(g.owner)
	for part, o := range g.owner {
		if o == "" {
			t.Fatalf("partition %d is free in a settled group: %v", part, g.owner)
		}
	}
	total := 0
	for _, m := range g.members {
		held := len(g.mine(m))
		total += held
		if held != p/n && held != (p+n-1)/n {
			t.Fatalf("member %s holds %d of %d partitions among %d members: %v", m, held, p, n, g.owner)
		}
	}
	if total != p {
		t.Fatalf("members hold %d of %d partitions", total, p)
	}
}

func TestBalance(t *testing.T) {
	t.Parallel()

	t.Run("six partitions over three members from scratch go round-robin, two each", func(t *testing.T) {
		t.Parallel()
		g := &groupModel{owner: make([]string, 6), members: []string{"a", "b", "c"}}
		for _, m := range g.members {
			g.step(m)
		}
		want := []string{"a", "b", "c", "a", "b", "c"}
		if !slices.Equal(g.owner, want) {
			t.Errorf("owners %v, want %v", g.owner, want)
		}
	})

	t.Run("a member above its share hands over only while another is below its own", func(t *testing.T) {
		t.Parallel()
		// b holds four of six; c's two are held by a seek, not a member.
		v := groupView{owner: []string{"b", "b", "b", "b", "seek", "seek"}, members: []string{"a", "b"}}
		a := balance(v, "b", []int{0, 1, 2, 3})
		if a.quota != 3 || len(a.release) != 1 || a.release[0]%2 != 0 {
			t.Errorf("b's assignment %+v: want quota 3 and one of a's round-robin partitions handed over", a)
		}
		// With every other member at its share, b keeps its extra: nobody
		// would take it (the seek's partition comes back free later).
		v = groupView{owner: []string{"b", "a", "b", "a", "b", "seek"}, members: []string{"a", "b"}}
		if a := balance(v, "b", []int{0, 2, 4}); len(a.release) != 0 || len(a.take) != 0 {
			t.Errorf("b's assignment %+v, want nothing to do", a)
		}
		v = groupView{owner: []string{"b", "b", "b", "b", "a", "seek"}, members: []string{"a", "b"}}
		if a := balance(v, "b", []int{0, 1, 2, 3}); len(a.release) != 1 {
			t.Errorf("b's assignment %+v, want one handed over to a, which holds 1 of 3", a)
		}
	})

	t.Run("a member not yet among the member leases counts itself", func(t *testing.T) {
		t.Parallel()
		a := balance(groupView{owner: make([]string, 4), members: []string{"b"}}, "a", nil)
		if a.quota != 2 || len(a.take) != 4 || a.take[0] != 0 || a.take[1] != 2 {
			t.Errorf("assignment %+v: want quota 2, its round-robin partitions 0 and 2 first", a)
		}
	})

	t.Run("a partition whose live lease is the member's own but which it does not hold is free to it", func(t *testing.T) {
		t.Parallel()
		a := balance(groupView{owner: []string{"a", "b"}, members: []string{"a", "b"}}, "a", nil)
		if !slices.Equal(a.take, []int{0}) {
			t.Errorf("take %v, want [0]", a.take)
		}
	})

	t.Run("from any start the members settle on their shares, and later joins and deaths move only what they must", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(17, 1))
		for trial := range 300 {
			partitions, n := 1+rng.IntN(16), 1+rng.IntN(6)
			g := &groupModel{owner: make([]string, partitions)}
			for i := range n {
				g.members = append(g.members, fmt.Sprintf("m%d", i))
			}
			for p := range g.owner {
				if k := rng.IntN(n + 1); k < n {
					g.owner[p] = g.members[k]
				}
			}
			name := fmt.Sprintf("trial %d: %d partitions, %d members", trial, partitions, n)
			t.Run(name, func(t *testing.T) {
				g.settle(t, rng)
				g.checkBalanced(t)

				// One member joins: it takes its share, every other
				// partition stays where it was.
				before := slices.Clone(g.owner)
				g.members = append(g.members, "new")
				g.settle(t, rng)
				g.checkBalanced(t)
				moved := 0
				for p := range g.owner {
					if g.owner[p] != before[p] {
						moved++
						if g.owner[p] != "new" {
							t.Fatalf("partition %d moved from %s to %s when a member joined", p, before[p], g.owner[p])
						}
					}
				}
				if moved != len(g.mine("new")) {
					t.Fatalf("%d partitions moved, the new member holds %d", moved, len(g.mine("new")))
				}

				// One member dies: its leases expire, and only its
				// partitions move, unless the shares of the survivors
				// shrink the other way (never, with fewer members).
				dead := g.members[rng.IntN(len(g.members))]
				before = slices.Clone(g.owner)
				g.members = slices.DeleteFunc(g.members, func(m string) bool { return m == dead })
				for p, o := range g.owner {
					if o == dead {
						g.owner[p] = ""
					}
				}
				g.settle(t, rng)
				g.checkBalanced(t)
				for p := range g.owner {
					if before[p] != dead && g.owner[p] != before[p] {
						t.Fatalf("partition %d moved from the survivor %s to %s when %s died", p, before[p], g.owner[p], dead)
					}
				}
			})
		}
	})
}
