package switchyardtest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"switchyard/omni"
)

// Thread is a conversation of the chat platform's inbox with one contact.
type Thread = omni.Thread

// ChatMessage is a message of a thread, inbound or outbound, with its
// delivery status (received for a message in; queued, sending, retrying,
// sent or failed for one out).
type ChatMessage = omni.OmniMessage

// threadOf is the customer's thread, when there is one.
func (a *App) threadOf(ctx context.Context, customer *User) (Thread, bool, error) {
	var res struct {
		Threads []Thread `json:"threads"`
	}
	if err := a.Get(ctx, "/admin/api/omni/threads?q="+url.QueryEscape(customer.TelegramID()), &res); err != nil {
		return Thread{}, false, err
	}
	for _, th := range res.Threads {
		if th.Contact.ProviderUserID == customer.TelegramID() {
			return th, true, nil
		}
	}
	return Thread{}, false, nil
}

// Thread is the customer's thread in the inbox; it fails the test when
// there is none (wait for ThreadOpened first).
func (a *App) Thread(t T, customer *User) Thread {
	t.Helper()
	th, ok, err := a.threadOf(t.Context(), customer)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	if !ok {
		t.Fatalf("switchyardtest: user %d has no thread in the inbox", customer.ID)
	}
	return th
}

// ThreadOpened holds once the customer has a thread in the inbox.
func ThreadOpened(customer *User) Condition {
	return Condition{
		What: fmt.Sprintf("a thread with user %d", customer.ID),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			_, ok, err := a.threadOf(ctx, customer)
			return ok, "no thread", err
		},
	}
}

// ThreadMessages are a thread's messages, oldest first.
func (a *App) ThreadMessages(t T, threadID omni.ThreadID) []ChatMessage {
	t.Helper()
	var res struct {
		Messages []ChatMessage `json:"messages"`
	}
	a.Do(t, http.MethodGet, threadPath(threadID)+"/messages", nil, &res)
	return res.Messages
}

// Reply is an operator's reply in the thread; it returns the message's id.
// The outbound role delivers it to the customer.
func (a *App) Reply(t T, threadID omni.ThreadID, text string) omni.MessageID {
	t.Helper()
	var res struct {
		MessageID omni.MessageID `json:"messageId"`
	}
	a.Do(t, http.MethodPost, threadPath(threadID)+"/messages", map[string]string{"text": text}, &res)
	return res.MessageID
}

func threadPath(id omni.ThreadID) string {
	return "/admin/api/omni/threads/" + strconv.FormatInt(int64(id), 10)
}

func (a *App) chatMessage(ctx context.Context, id omni.MessageID) (ChatMessage, error) {
	var m ChatMessage
	err := a.Get(ctx, "/admin/api/omni/messages/"+strconv.FormatInt(int64(id), 10), &m)
	return m, err
}

// ChatMessage is the message id with its delivery state now.
func (a *App) ChatMessage(t T, id omni.MessageID) ChatMessage {
	t.Helper()
	m, err := a.chatMessage(t.Context(), id)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return m
}

// MessageStatus holds once the chat message id has status (sent, failed,
// retrying, …).
func MessageStatus(id omni.MessageID, status omni.Status) Condition {
	return Condition{
		What: fmt.Sprintf("chat message %d %s", id, status),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			m, err := a.chatMessage(ctx, id)
			if err != nil {
				return notFound(err)
			}
			saw := fmt.Sprintf("%s after %d attempts", m.Status, m.Attempts)
			if m.FailureReason != "" {
				saw += ": " + m.FailureReason
			}
			return m.Status == status, saw, nil
		},
	}
}
