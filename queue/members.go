package queue

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"switchyard/store"
)

// Membership of a consumer group. Every running subscriber of a group, in
// any process on the database, is a member: it holds a member lease,
// queue.member/<topic>/<group>/<owner>, renewed with its partition leases
// (queue.group/<topic>/<group>/<partition>). At every poll, and whenever a
// member of the same process joins or hands partitions over (the group's
// signal), a subscriber reads the group's leases once and balances: with N
// live members and P partitions, the member at index i of the sorted owner
// ids is due share(P, N, i) — ⌈P/N⌉ for the first P mod N, ⌊P/N⌋ for the
// rest, so the shares cover every partition and none exceeds ⌈P/N⌉. A member
// below its share takes free partitions (no live lease), first those that a
// round-robin over the sorted members gives it, so that members racing for
// free partitions mostly try different ones; a member above its share, while
// another is below, hands its extras over once their transactions in flight
// have finished, releasing their leases and waking the group. A stopping
// member releases everything at once; one that dies keeps its partitions
// until its leases expire, when the survivors' shares grow and they take
// them. Partitions stay where they are as long as the shares are met, so a
// change of members moves only as many as it must.
//
// Commits are fenced by the lease: the transaction of a partition's records
// checks, as its last step, that the lease is still this owner's and
// unexpired (store.LeaseHeldTx), so that an owner whose lease ran out —
// paused, partitioned, too slow to renew — commits nothing once another may
// have taken over, and the records stay for the new owner. The offset row
// lock (lockGroupPartition) and the conditional offset updates order the
// rest.

// errLeaseLost is the error of a transaction of records whose partition's
// lease was no longer this subscriber's when it was about to commit: the
// transaction is rolled back, and the subscriber drops the partition.
const errLeaseLost = Error("queue: the partition's lease is no longer this subscriber's")

func partitionLeasePrefix(topic, group string) string {
	return "queue.group/" + topic + "/" + group + "/"
}
func memberLeasePrefix(topic, group string) string {
	return memberLeasesPrefix + topic + "/" + group + "/"
}

// memberLeasesPrefix starts the name of every group's member leases.
const memberLeasesPrefix = "queue.member/"

func memberLeaseName(topic, group, owner string) string {
	return memberLeasePrefix(topic, group) + owner
}

// groupView is a group's leases as read at one moment.
type groupView struct {
	// now is the lease clock's time of the read.
	now time.Time
	// members are the owners of the live member leases, sorted.
	members []string
	// owner is, by partition, the holder of its live lease; "" when free.
	owner []string
	// expires is, by partition, when that lease expires; zero when free.
	expires []time.Time
}

// readGroupView reads the group's partition and member leases (one read).
func readGroupView(ctx context.Context, db *store.DB, topic, group string, partitions int) (groupView, error) {
	pp, mp := partitionLeasePrefix(topic, group), memberLeasePrefix(topic, group)
	leases, now, err := db.LeasesByPrefix(ctx, pp, mp)
	if err != nil {
		return groupView{}, fmt.Errorf("queue: leases of %s/%s: %w", topic, group, err)
	}
	v := groupView{now: now, owner: make([]string, partitions), expires: make([]time.Time, partitions)}
	for _, l := range leases {
		if !l.HeldAt(now) {
			continue
		}
		// A name that only starts like this group's belongs to a group whose
		// name continues this one's ("g/x"): a member lease is named after
		// its owner, a partition lease after a partition number.
		switch {
		case strings.HasPrefix(l.Name, mp):
			if l.Name[len(mp):] == l.Owner {
				v.members = append(v.members, l.Owner)
			}
		case strings.HasPrefix(l.Name, pp):
			suffix := l.Name[len(pp):]
			if p, err := strconv.Atoi(suffix); err == nil && p >= 0 && p < partitions && strconv.Itoa(p) == suffix {
				v.owner[p], v.expires[p] = l.Owner, l.ExpiresAt
			}
		}
	}
	sort.Strings(v.members)
	return v, nil
}

// share is how many of partitions the member at index i of n sorted members
// is due: the first partitions%n members get one more.
func share(partitions, n, i int) int {
	q := partitions / n
	if i < partitions%n {
		q++
	}
	return q
}

// assignment is what one member does after a look at its group's leases.
type assignment struct {
	// quota is the member's share.
	quota int
	// take lists the free partitions, best first, to try until the member
	// holds its quota.
	take []int
	// release lists the member's partitions to hand over.
	release []int
}

// balance decides what member me, holding the partitions mine, does with the
// group's partitions, given a view of their leases: me counts as a member
// even when its member lease is not in the view yet. A partition whose live
// lease is me's but which me does not hold (a release that failed, an
// expired tenure) is as good as free for me.
func balance(v groupView, me string, mine []int) assignment {
	members := v.members
	if i, found := slices.BinarySearch(members, me); !found {
		members = slices.Insert(slices.Clone(members), i, me)
	}
	n, partitions := len(members), len(v.owner)
	idx, _ := slices.BinarySearch(members, me)
	a := assignment{quota: share(partitions, n, idx)}
	held := make([]bool, partitions)
	for _, p := range mine {
		held[p] = true
	}
	switch {
	case len(mine) < a.quota:
		var others []int
		for p := range partitions {
			if held[p] || (v.owner[p] != "" && v.owner[p] != me) {
				continue
			}
			if p%n == idx {
				a.take = append(a.take, p)
			} else {
				others = append(others, p)
			}
		}
		a.take = append(a.take, others...)
	case len(mine) > a.quota:
		count := map[string]int{}
		for _, o := range v.owner {
			if o != "" && o != me {
				count[o]++
			}
		}
		short := make([]bool, n)
		anyShort := false
		for i, m := range members {
			if m != me && count[m] < share(partitions, n, i) {
				short[i], anyShort = true, true
			}
		}
		if !anyShort {
			break // nobody would take them
		}
		// Hand over first what a short member would hold in a group
		// balanced from scratch, then what another would, then the highest.
		rank := func(p int) int {
			switch pm := p % n; {
			case short[pm]:
				return 0
			case pm != idx:
				return 1
			default:
				return 2
			}
		}
		cand := slices.Clone(mine)
		sort.Slice(cand, func(i, j int) bool {
			if ri, rj := rank(cand[i]), rank(cand[j]); ri != rj {
				return ri < rj
			}
			return cand[i] > cand[j]
		})
		a.release = cand[:len(mine)-a.quota]
	}
	return a
}

// renewLeases renews the subscriber's member lease and the leases of the
// partitions it owns; a partition whose lease another owner took meanwhile
// is dropped. The first renewal of the member lease is its joining: the
// group's other members in this process balance at once.
func (s *Subscription) renewLeases(ctx context.Context) {
	if _, err := s.db.AcquireLease(ctx, s.member, s.owner, s.opts.LeaseTTL); err != nil {
		s.log.Error("queue member lease failed", slog.Any("err", err))
	} else if !s.joined {
		s.joined = true
		s.announce()
	}
	for _, p := range s.parts {
		if !p.owned {
			continue
		}
		held, err := s.db.AcquireLease(ctx, leaseName(s.t.name, s.group, p.id), s.owner, s.opts.LeaseTTL)
		if err != nil {
			s.log.Error("queue lease failed", slog.Int("partition", p.id), slog.Any("err", err))
			continue
		}
		if !held {
			s.lose(p, "queue partition lost to another subscriber")
		}
	}
}

// rebalance looks at the group's leases and moves towards the subscriber's
// share: it drops the partitions another owner holds now, takes free ones
// while below its share, and marks extras to hand over (releaseIdle).
func (s *Subscription) rebalance(ctx context.Context) {
	v, err := readGroupView(ctx, s.db, s.t.name, s.group, len(s.parts))
	if err != nil {
		s.log.Error("queue group leases not read", slog.Any("err", err))
		return
	}
	var mine []int
	for _, p := range s.parts {
		if !p.owned {
			continue
		}
		if o := v.owner[p.id]; o != "" && o != s.owner {
			s.lose(p, "queue partition taken by another subscriber")
			continue
		}
		mine = append(mine, p.id)
	}
	a := balance(v, s.owner, mine)
	for _, p := range s.parts {
		p.releasing = false
	}
	for _, id := range a.release {
		s.parts[id].releasing = true
	}
	held := len(mine)
	for _, id := range a.take {
		if held >= a.quota {
			break
		}
		// A partition whose last transaction (of an earlier tenure) is
		// still in flight is taken at a later look, once it has reported.
		if p := s.parts[id]; !p.busy && s.take(ctx, p) {
			held++
		}
	}
	s.takeForgotten(ctx, v)
	s.releaseIdle(ctx)
}

// takeForgotten takes, whatever this subscriber's share, a partition that
// its looks have found free for a third of the lease TTL: the member whose
// share it is has not taken it (a member that died holding no partition
// still counts until its member lease expires, and so keeps a share nobody
// takes). No partition stays unowned for long; if the partition is another
// member's share, the usual hand-over gives it to that member once it asks.
func (s *Subscription) takeForgotten(ctx context.Context, v groupView) {
	if len(s.freeSince) != len(s.parts) {
		s.freeSince = make([]time.Time, len(s.parts))
	}
	for _, p := range s.parts {
		if p.owned || v.owner[p.id] != "" {
			s.freeSince[p.id] = time.Time{}
			continue
		}
		since := s.freeSince[p.id]
		if since.IsZero() {
			s.freeSince[p.id] = v.now
			continue
		}
		if v.now.Sub(since) >= s.opts.LeaseTTL/3 && !p.busy && s.take(ctx, p) {
			s.log.Warn("queue partition taken beyond this member's share: it was free for a third of the lease",
				slog.Int("partition", p.id), slog.Duration("free_for", v.now.Sub(since)))
			s.freeSince[p.id] = time.Time{}
		}
	}
}

// take takes partition p's lease if it is free and loads the partition.
func (s *Subscription) take(ctx context.Context, p *partState) bool {
	held, err := s.db.AcquireLease(ctx, leaseName(s.t.name, s.group, p.id), s.owner, s.opts.LeaseTTL)
	if err != nil {
		s.log.Error("queue lease failed", slog.Int("partition", p.id), slog.Any("err", err))
		return false
	}
	if !held {
		return false
	}
	p.owned, p.releasing = true, false
	s.load(ctx, p)
	s.log.Info("queue partition taken", slog.Int("partition", p.id), slog.Int64("committed", p.committed))
	return true
}

// releaseIdle hands over the partitions marked for it that have no
// transaction in flight.
func (s *Subscription) releaseIdle(ctx context.Context) {
	released := false
	for _, p := range s.parts {
		if !p.owned || !p.releasing || p.busy {
			continue
		}
		if err := s.db.ReleaseLease(ctx, leaseName(s.t.name, s.group, p.id), s.owner); err != nil {
			s.log.Error("queue lease release failed", slog.Int("partition", p.id), slog.Any("err", err))
			continue // tried again at the next look
		}
		s.forget(p)
		s.log.Info("queue partition handed over to another member", slog.Int("partition", p.id))
		released = true
	}
	if released {
		s.announce()
	}
}

// releaseLeases leaves the group: the member lease first, so that the
// members that look next count one member fewer, then every partition.
func (s *Subscription) releaseLeases(ctx context.Context) {
	if err := s.db.ReleaseLease(ctx, s.member, s.owner); err != nil {
		s.log.Error("queue member lease release failed", slog.Any("err", err))
	}
	for _, p := range s.parts {
		if p.owned {
			if err := s.db.ReleaseLease(ctx, leaseName(s.t.name, s.group, p.id), s.owner); err != nil {
				s.log.Error("queue lease release failed", slog.Int("partition", p.id), slog.Any("err", err))
			}
			s.forget(p)
		}
	}
	s.announce()
}

// lose forgets a partition whose lease is no longer this subscriber's.
func (s *Subscription) lose(p *partState, why string) {
	s.forget(p)
	s.log.Warn(why, slog.Int("partition", p.id))
}

// forget drops an owned partition's state and its gauges: another process
// exports them now.
func (s *Subscription) forget(p *partState) {
	p.owned, p.releasing = false, false
	s.drop(p)
	part := strconv.Itoa(p.id)
	metricLag.DeleteLabelValues(s.t.name, s.group, part)
	metricOldest.DeleteLabelValues(s.t.name, s.group, part)
}

// announce wakes the group's other subscribers: a member joined, or
// partitions are free. Those of this process wake at once, those of other
// processes on PostgreSQL at the broadcast (notify.go), and on SQLite, or
// when a broadcast is missed, at their next poll.
func (s *Subscription) announce() { groupSignal(s.db, s.t.name, s.group).notify() }

// fence is the last step of a transaction of partition's records: it fails
// with errLeaseLost unless the partition's lease is still this subscriber's
// and unexpired, so that nothing of the transaction is committed.
func (s *Subscription) fence(ctx context.Context, tx *sql.Tx, partition int) error {
	held, err := s.db.LeaseHeldTx(ctx, tx, leaseName(s.t.name, s.group, partition), s.owner)
	if err != nil {
		return err
	}
	if !held {
		return errLeaseLost
	}
	return nil
}
