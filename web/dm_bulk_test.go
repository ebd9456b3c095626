package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/bot/onboarding"
	"switchyard/queue"
	"switchyard/testwait"
)

// Failed DMs are sent again in bulk from the Bot page: the chosen ones
// through a confirmation that states their count.
func TestFailedDMsInBulk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDMConsole(t, 4646)
	c, be, qa := d.c, d.be, d.qa

	// Three users who never started the bot: the DMs their wallets ask for
	// are refused ("chat not found") and dead-lettered.
	for i := range 3 {
		u, err := be.CreateUser(ctx, backend.NewUser{Link: fmt.Sprint("user", i), Name: "U", TelegramID: contract.TelegramID(fmt.Sprint(6100 + i))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := be.ConnectWallet(ctx, u.UID, fmt.Sprint("EQ", i)); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	testwait.Until(t, 10*time.Second, "three failed DMs on the Bot page", func() bool {
		ids = rowIDs(tid(c.get(t, "/admin/bot", http.StatusOK), "outgoing-table").Find("tbody tr[data-testid]"))
		return len(ids) == 3
	})
	doc := c.get(t, "/admin/bot", http.StatusOK)
	if tid(doc, "bulk-dms").Length() != 1 || !strings.Contains(trimmed(tid(doc, "bulk-dms")), "all 3 matching") {
		t.Fatalf("the bulk bar says %q", trimmed(tid(doc, "bulk-dms")))
	}
	chosen := []string{strings.TrimPrefix(ids[0], "outgoing-"), strings.TrimPrefix(ids[1], "outgoing-")}
	form := url.Values{"scope": {"chosen"}, "id": chosen, "back": {"/admin/bot"}}
	_, body := c.post(t, "/admin/bot/dms/redrive", form)
	if !strings.Contains(body, "Send the 2 chosen failed Telegram calls again?") {
		t.Fatalf("want a confirmation of 2:\n%s", body)
	}
	if _, flash := c.act(t, "/admin/bot/dms/redrive", form); !strings.Contains(trimmed(flash), "2 failed Telegram calls sent again") {
		t.Fatalf("flash %q", trimmed(flash))
	}
	letters, err := qa.ListDead(ctx, queue.DeadFilter{Queue: onboarding.DMQueue, ID: strings.TrimPrefix(ids[2], "outgoing-")})
	if err != nil || len(letters) != 1 {
		t.Fatalf("the DM not chosen: %d dead letters, %v", len(letters), err)
	}
}
