package switchyardtest_test

import (
	"fmt"
	"strings"
	"time"

	"switchyard/switchyardtest"
)

// An instance on the manual clock, which stands still until the test moves
// it. (In a test, t is the test's *testing.T; an example has none, so it
// uses a stand-in.)
func ExampleStart() {
	t := new(fakeT)
	defer t.done()

	app := switchyardtest.Start(t, switchyardtest.Options{})
	fmt.Println(app.Now(t).Format(time.RFC3339))
	app.Advance(t, 10*time.Minute)
	fmt.Println(app.Now(t).Format(time.RFC3339))
	// Output:
	// 2026-01-01T09:00:00Z
	// 2026-01-01T09:10:00Z
}

// A Telegram user opens the onboarding bot with a leader's referral code,
// and the bot greets them on the leader's behalf.
func ExampleUser_Start() {
	t := new(fakeT)
	defer t.done()
	app := switchyardtest.Start(t, switchyardtest.Options{})

	leader := app.CreateAccount(t, switchyardtest.NewAccount{Link: "anna", Name: "Anna"})
	boris := app.TelegramUser(5001, "Boris")
	boris.Start(t, leader.Link)
	app.WaitFor(t, switchyardtest.BotSaid(boris, "Вас пригласил(а) Anna"))

	for _, m := range boris.Chat(t, switchyardtest.OnboardingBot) {
		first, _, _ := strings.Cut(m.Text, "\n")
		fmt.Printf("%s: %s\n", m.From, first)
	}
	// Output:
	// user: /start anna
	// bot: Здравствуйте, Boris! 👋
}

// The backend emits an event the onboarding bot cannot read: the outbox
// retries it 60 s · 2^n after each failure and dead-letters it after the
// tenth. The test moves the clock to each retry: seventeen hours in a
// fraction of a second.
func ExampleEventDead() {
	t := new(fakeT)
	defer t.done()
	app := switchyardtest.Start(t, switchyardtest.Options{})
	began := app.Now(t)

	id := app.EmitEvent(t, switchyardtest.Event{Type: switchyardtest.EventRegistered, TelegramID: "5002",
		Payload: map[string]any{"leaderUid": "not-a-uid"}})
	for n := 1; n < 10; n++ {
		app.WaitFor(t, switchyardtest.EventFailed(id, n))
		app.AdvanceTo(t, *app.OutboxEvent(t, id).NextRetryAt)
	}
	app.WaitFor(t, switchyardtest.EventDead(id))

	ev := app.OutboxEvent(t, id)
	fmt.Printf("%s after %d attempts, %s of the clock later\n", ev.State, ev.Attempts, app.Now(t).Sub(began))
	// Output:
	// dead after 10 attempts, 17h2m0s of the clock later
}

// A user registers through a referral link whose owner the referral
// consumer has not heard of: it retries the event with its backoff, and
// bonds the two at the first retry after the owner's event.
func ExampleBondCreated() {
	t := new(fakeT)
	defer t.done()
	app := switchyardtest.Start(t, switchyardtest.Options{})
	owner := "aaaaaaaa-0000-4000-8000-00000000000a"
	user := "bbbbbbbb-0000-4000-8000-00000000000b"

	app.CreateLink(t, switchyardtest.Link{URL: "late-owner", OwnerUserID: owner})
	app.UpsertIdentityUser(t, switchyardtest.IdentityUser{UserID: user, ReferrerURL: "late-owner"})
	app.WaitFor(t, switchyardtest.ReferralWaiting(1))
	app.Advance(t, 20*time.Minute)

	app.UpsertIdentityUser(t, switchyardtest.IdentityUser{UserID: owner, Type: "Agent"})
	app.WaitFor(t, switchyardtest.ReplicaExists(owner, 1))
	app.Advance(t, 20*time.Minute)
	app.WaitFor(t, switchyardtest.BondCreated(user))

	fmt.Println("referred by", app.Referrer(t, user).Referrer.UserID)
	// Output:
	// referred by aaaaaaaa-0000-4000-8000-00000000000a
}

// A customer writes to a business account connected to the chat bot; an
// operator replies in the thread, and the reply reaches the customer.
func ExampleApp_Reply() {
	t := new(fakeT)
	defer t.done()
	app := switchyardtest.Start(t, switchyardtest.Options{})

	conn := app.ConnectBusiness(t, app.TelegramUser(7001, "Shop"))
	carol := app.TelegramUser(7002, "Carol")
	carol.WriteToBusiness(t, conn, "Do you ship to Kazan?")
	app.WaitFor(t, switchyardtest.ThreadOpened(carol))

	id := app.Reply(t, app.Thread(t, carol).ID, "Yes, in two days.")
	app.WaitFor(t, switchyardtest.MessageStatus(id, "sent"))

	for _, m := range app.ThreadMessages(t, app.Thread(t, carol).ID) {
		fmt.Printf("%s (%s): %s\n", m.Direction, m.Origin, m.Text)
	}
	// Output:
	// inbound (provider): Do you ship to Kazan?
	// outbound (rule): Здравствуйте! Мы получили ваше сообщение и скоро ответим.
	// outbound (operator): Yes, in two days.
}
