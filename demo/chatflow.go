package demo

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/mymmrac/telego"
)

// maxCustomers is how many business customers one run writes from; later
// messages come from the ones who wrote before.
const maxCustomers = 60

// chatJourney is one message to the operator inbox: mostly a Telegram
// Business customer writing to the connected account (a new customer, or one
// who wrote before); now and then someone writing to the inbox bot directly,
// who often blocks the bot right after.
func (s *sim) chatJourney(ctx context.Context) error {
	if s.chance(0.12) {
		return s.directCustomer()
	}
	c := s.someCustomer()
	if c == nil {
		c = s.newCustomer(s.cast.BusinessConnectionID)
	}
	text := customerTexts[s.intn(len(customerTexts))]
	m, err := s.inbox.BusinessMessage(s.cast.BusinessConnectionID, c.user(), text)
	if err != nil {
		return failed("write to the business account", err)
	}
	s.record(c, m)
	return nil
}

// directCustomer writes to the inbox bot in a private chat and, six times
// in ten, blocks it at once: the operator's reply then fails with
// Telegram's reason.
func (s *sim) directCustomer() error {
	c := s.newCustomer("")
	m, err := s.inbox.Send(c.user(), customerTexts[s.intn(len(customerTexts))])
	if err != nil {
		return failed("write to the inbox bot", err)
	}
	s.record(c, m)
	if s.chance(0.6) {
		if err := s.inbox.Block(c.user()); err != nil {
			return failed("block the inbox bot", err)
		}
		s.mu.Lock()
		c.blocked = true
		s.led.blocked++
		s.mu.Unlock()
	}
	return nil
}

func (s *sim) newCustomer(conn string) *customer {
	first, last := s.person()
	c := &customer{key: custKey{conn: conn, id: s.idBase + s.next()}, first: first, last: last}
	s.mu.Lock()
	s.led.customers[c.key] = c
	s.mu.Unlock()
	return c
}

// someCustomer picks a business customer of this run who wrote before, or
// nil for a new one: while there are fewer than three, and a third of the
// time until there are maxCustomers.
func (s *sim) someCustomer() *customer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pool []*customer
	for _, c := range s.led.customers {
		if c.key.conn != "" {
			pool = append(pool, c)
		}
	}
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	if len(pool) < 3 || (len(pool) < maxCustomers && s.rng.Float64() < 0.35) {
		return nil
	}
	return pool[s.rng.IntN(len(pool))]
}

func (s *sim) record(c *customer, m telego.Message) {
	s.mu.Lock()
	s.led.msgs = append(s.led.msgs, &customerMsg{cust: c, id: m.MessageID})
	s.mu.Unlock()
}

func (c *customer) user() telego.User {
	return telego.User{ID: c.key.id, FirstName: c.first, LastName: c.last, LanguageCode: "ru"}
}

// operate is the operator at the console: every operatorEvery they look at
// the open threads, answer most unread ones of this run's customers (always
// the ones who blocked the bot, to show the failure) and mark them read.
func (s *sim) operate(ctx context.Context) {
	for {
		if err := sleep(ctx, operatorEvery); err != nil {
			return
		}
		var ta threadsAnswer
		if err := s.c.admin(ctx, http.MethodGet, "/omni/threads?state=open&limit=100", nil, &ta); err != nil {
			continue
		}
		for _, th := range ta.Threads {
			if th.Unread == 0 {
				continue
			}
			id, err := strconv.ParseInt(th.Contact.ProviderUserID, 10, 64)
			if err != nil {
				continue
			}
			s.mu.Lock()
			c := s.led.customers[custKey{conn: th.BusinessConnectionID, id: id}]
			if c != nil {
				c.thread = th.ID
			}
			blocked := c != nil && c.blocked
			s.mu.Unlock()
			if c == nil {
				continue
			}
			path := "/omni/threads/" + strconv.FormatInt(th.ID, 10)
			if blocked || s.chance(0.7) {
				n := s.next()
				text := fmt.Sprintf("%s, %s (ответ №%d)", c.first, operatorTexts[s.intn(len(operatorTexts))], n)
				var ra replyAnswer
				if err := s.c.admin(ctx, http.MethodPost, path+"/messages", map[string]string{"text": text}, &ra); err != nil {
					continue
				}
				s.mu.Lock()
				s.led.replies = append(s.led.replies, &reply{cust: c, id: ra.MessageID, text: text})
				s.mu.Unlock()
			}
			_ = s.c.admin(ctx, http.MethodPost, path+"/read", nil, nil)
		}
	}
}
