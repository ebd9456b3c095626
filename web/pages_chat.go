package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"switchyard/mask"
	"switchyard/omni"
)

// chatOps is what the console needs of the chat platform (*omni.Admin).
type chatOps interface {
	ListThreads(ctx context.Context, f omni.ThreadFilter) ([]omni.Thread, error)
	CountThreads(ctx context.Context, f omni.ThreadFilter, upTo int64) (int64, error)
	CountMessages(ctx context.Context, thread omni.ThreadID, f omni.MessageFilter) (int64, error)
	Thread(ctx context.Context, id omni.ThreadID) (omni.Thread, error)
	ThreadDigests(ctx context.Context, ids []omni.ThreadID) (map[omni.ThreadID]omni.ThreadDigest, error)
	Counts(ctx context.Context) (omni.Counts, error)
	InboundBetween(ctx context.Context, from, to time.Time) (int64, error)
	OutboundBetween(ctx context.Context, from, to time.Time) (int64, error)
	ListMessages(ctx context.Context, thread omni.ThreadID, f omni.MessageFilter) ([]omni.OmniMessage, error)
	Reply(ctx context.Context, thread omni.ThreadID, text string) (omni.OmniMessage, error)
	CloseThread(ctx context.Context, thread omni.ThreadID) error
	MarkRead(ctx context.Context, thread omni.ThreadID) error
}

// threadRow is one thread in the inbox.
type threadRow struct {
	ID          string
	Href        string
	Contact     string
	Username    string
	Channel     string
	State       string
	Unread      int
	LastAt      string
	LastAgo     string
	LastText    string
	LastFromUs  bool
	LastStatus  string
	Failed      int64
	Unreachable string // why the contact cannot be reached; empty when reachable
}

func channelText(c omni.Channel) string {
	switch c {
	case omni.ChannelTelegramBusiness:
		return "Telegram Business"
	case omni.ChannelTelegramBot:
		return "Telegram bot"
	}
	return string(c)
}

func toThreadRow(t omni.Thread, d omni.ThreadDigest, now time.Time) threadRow {
	name := t.Contact.Name
	if name == "" {
		name = "contact " + t.Contact.ProviderUserID
	}
	row := threadRow{
		ID: strconv.FormatInt(int64(t.ID), 10), Href: "/admin/chat/threads/" + strconv.FormatInt(int64(t.ID), 10),
		Contact: name, Username: t.Contact.Username, Channel: channelText(t.Channel), State: string(t.State),
		Unread: t.Unread, LastAt: whenPtr(t.LastMessageAt), Failed: d.Failed,
		LastFromUs: d.LastDirection == omni.DirectionOutbound, LastStatus: string(d.LastStatus),
	}
	if t.LastMessageAt != nil {
		row.LastAgo = ago(now, *t.LastMessageAt)
	}
	switch {
	case d.LastText != "":
		row.LastText = clip(mask.Phones(d.LastText), 90)
	case d.LastKind != "":
		row.LastText = "(" + string(d.LastKind) + ")"
	}
	if !t.Contact.Reachable {
		row.Unreachable = t.Contact.UnreachableReason
		if row.Unreachable == "" {
			row.Unreachable = "unreachable"
		}
	}
	return row
}

// inboxModel is the Chat page.
type inboxModel struct {
	Wired   bool
	State   string
	Search  string
	Tabs    []stateTab
	Threads []threadRow
	Pager   pager
}

// searchKeep are the filters the inbox's search keeps.
func (m inboxModel) searchKeep() []formField {
	if m.State == "" {
		return nil
	}
	return []formField{{"state", m.State}}
}

func (s *Server) threadRows(ctx context.Context, threads []omni.Thread) ([]threadRow, error) {
	ids := make([]omni.ThreadID, len(threads))
	for i, t := range threads {
		ids[i] = t.ID
	}
	digests, err := s.opts.Chat.ThreadDigests(ctx, ids)
	if err != nil {
		return nil, err
	}
	now := s.opts.DB.Now()
	rows := make([]threadRow, 0, len(threads))
	for _, t := range threads {
		rows = append(rows, toThreadRow(t, digests[t.ID], now))
	}
	return rows, nil
}

func (s *Server) chatInbox(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Chat", "chat")
	m := inboxModel{Wired: s.opts.Chat != nil, State: r.URL.Query().Get("state"), Search: searchTerm(r.URL.Query())}
	if m.State != string(omni.ThreadOpen) && m.State != string(omni.ThreadClosed) {
		m.State = ""
	}
	for _, t := range []struct{ state, label string }{{"", "All"}, {"open", "Open"}, {"closed", "Closed"}} {
		v := url.Values{}
		if t.state != "" {
			v.Set("state", t.state)
		}
		if m.Search != "" {
			v.Set("q", m.Search)
		}
		href := "/admin/chat"
		if len(v) > 0 {
			href += "?" + v.Encode()
		}
		testid := "tab-" + t.state
		if t.state == "" {
			testid = "tab-all"
		}
		m.Tabs = append(m.Tabs, stateTab{Label: t.label, Href: href, Active: m.State == t.state, Testid: testid})
	}
	if m.Wired {
		ctx := r.Context()
		win := windowOf(r)
		f := omni.ThreadFilter{State: omni.ThreadState(m.State), Search: m.Search, Before: win.Before, After: win.After, Limit: perPage + 1}
		threads, err := s.opts.Chat.ListThreads(ctx, f)
		if errors.Is(err, omni.ErrInvalidFilter) {
			s.problem(w, r, http.StatusBadRequest, "chat", "That is no place in the inbox: "+err.Error())
			return
		}
		if err != nil {
			s.failed(w, r, "chat", err)
			return
		}
		threads, newer, older := fitWindow(threads, perPage, win)
		var first, last string
		if len(threads) > 0 {
			first, last = threads[0].Key(), threads[len(threads)-1].Key()
		}
		m.Pager = newPager(listBase(r), len(threads), newer, older, first, last, "threads")
		count := func(ctx context.Context, w window, upTo int64) (int64, error) {
			cf := f
			cf.Before, cf.After = w.Before, w.After
			return s.opts.Chat.CountThreads(ctx, cf, upTo)
		}
		if err := m.Pager.place(ctx, count, win, first, last, f.SearchReadsRows()); err != nil {
			s.failed(w, r, "chat", err)
			return
		}
		if m.Threads, err = s.threadRows(ctx, threads); err != nil {
			s.failed(w, r, "chat", err)
			return
		}
	}
	s.render(w, r, inboxPage(p, m))
}

// messageRow is one message of a thread with its delivery status.
type messageRow struct {
	ID        string
	Seq       int64
	Outbound  bool
	Origin    string
	Kind      string
	Text      string
	Status    string
	Detail    string // the failure reason, or the next attempt of a retry
	At        string
	Edited    bool
	Deleted   bool
	Failed    bool
	Attempts  int
	Delivered string
}

func toMessageRow(m omni.OmniMessage, now time.Time) messageRow {
	row := messageRow{
		ID: strconv.FormatInt(int64(m.ID), 10), Seq: m.Seq, Outbound: m.Direction == "outbound",
		Origin: string(m.Origin), Kind: string(m.Kind), Text: mask.Phones(m.Text), Status: string(m.Status),
		At: when(m.CreatedAt), Edited: m.EditedAt != nil, Deleted: m.DeletedAt != nil,
		Failed: m.Status == omni.StatusFailed, Attempts: m.Attempts,
	}
	switch {
	case m.Status == omni.StatusFailed:
		row.Detail = mask.Phones(m.FailureReason)
	case m.Status == omni.StatusRetrying && m.NextAttemptAt != nil:
		row.Detail = "next attempt " + ago(now, *m.NextAttemptAt)
		if m.FailureReason != "" {
			row.Detail += " after: " + mask.Phones(m.FailureReason)
		}
	}
	if m.SentAt != nil {
		row.Delivered = when(*m.SentAt)
	}
	return row
}

// threadModel is one thread's page.
type threadModel struct {
	Thread   threadRow
	Known    bool // the thread was found in the inbox listing
	Messages []messageRow
	MaxRunes int
	Draft    string
	Self     string
	// Pager pages the thread from its latest message back.
	Pager pager
}

func (s *Server) chatThread(w http.ResponseWriter, r *http.Request) {
	id, ok := pathInt(r, "id")
	if !ok || s.opts.Chat == nil {
		s.problem(w, r, http.StatusNotFound, "chat", "There is no such thread.")
		return
	}
	m, err := s.threadModel(r.Context(), omni.ThreadID(id), windowOf(r), listBase(r))
	if errors.Is(err, omni.ErrThreadNotFound) {
		s.problem(w, r, http.StatusNotFound, "chat", "There is no thread "+strconv.FormatInt(id, 10)+".")
		return
	}
	if err != nil {
		s.failed(w, r, "chat", err)
		return
	}
	s.render(w, r, threadPage(s.newPage(w, r, m.Thread.Contact, "chat"), m))
}

// threadModel is a thread's page: the window of its messages w asks for,
// the latest first in the list's order and shown oldest first, as a chat
// reads.
func (s *Server) threadModel(ctx context.Context, id omni.ThreadID, w window, base url.URL) (threadModel, error) {
	m := threadModel{MaxRunes: omni.MaxReplyRunes, Self: "/admin/chat/threads/" + strconv.FormatInt(int64(id), 10)}
	f := omni.MessageFilter{Newest: true, BeforeSeq: int64Key(w.Before), Limit: perPage + 1}
	if w.Newer() {
		f = omni.MessageFilter{AfterSeq: int64Key(w.After), Limit: perPage + 1}
	}
	msgs, err := s.opts.Chat.ListMessages(ctx, id, f)
	if err != nil {
		return m, err
	}
	msgs, newer, older := fitWindow(msgs, perPage, w)
	var first, last string
	if len(msgs) > 0 {
		first, last = strconv.FormatInt(msgs[0].Seq, 10), strconv.FormatInt(msgs[len(msgs)-1].Seq, 10)
	}
	m.Pager = newPager(base, len(msgs), newer, older, first, last, "messages")
	count := func(ctx context.Context, w window, _ int64) (int64, error) {
		return s.opts.Chat.CountMessages(ctx, id, omni.MessageFilter{BeforeSeq: int64Key(w.Before), AfterSeq: int64Key(w.After)})
	}
	if err := m.Pager.place(ctx, count, w, first, last, false); err != nil {
		return m, err
	}
	now := s.opts.DB.Now()
	for i := len(msgs) - 1; i >= 0; i-- {
		m.Messages = append(m.Messages, toMessageRow(msgs[i], now))
	}
	t, err := s.opts.Chat.Thread(ctx, id)
	switch {
	case errors.Is(err, omni.ErrThreadNotFound):
	case err != nil:
		return m, err
	default:
		rows, err := s.threadRows(ctx, []omni.Thread{t})
		if err != nil {
			return m, err
		}
		m.Thread, m.Known = rows[0], true
	}
	if !m.Known {
		m.Thread = threadRow{ID: strconv.FormatInt(int64(id), 10), Contact: "Thread " + strconv.FormatInt(int64(id), 10)}
	}
	return m, nil
}

func (s *Server) chatReply(w http.ResponseWriter, r *http.Request) {
	id, _ := pathInt(r, "id")
	self := "/admin/chat/threads/" + strconv.FormatInt(id, 10)
	if !s.parseForm(w, r, self) {
		return
	}
	if s.opts.Chat == nil {
		s.done(w, r, self, false, "The chat platform is not wired in this process.")
		return
	}
	text := r.PostForm.Get("text")
	switch {
	case strings.TrimSpace(text) == "":
		s.done(w, r, self, false, "The reply is empty.")
		return
	case !utf8.ValidString(text) || utf8.RuneCountInString(text) > omni.MaxReplyRunes:
		s.done(w, r, self, false, "A reply has at most "+strconv.Itoa(omni.MaxReplyRunes)+" characters.")
		return
	}
	msg, err := s.opts.Chat.Reply(r.Context(), omni.ThreadID(id), text)
	if err != nil {
		s.actionFailed(w, r, self, err, errors.Is(err, omni.ErrThreadNotFound) || errors.Is(err, omni.ErrCannotReply))
		return
	}
	s.done(w, r, self, true, "Reply "+strconv.FormatInt(int64(msg.ID), 10)+" queued; its status follows below.")
}

func (s *Server) chatRead(w http.ResponseWriter, r *http.Request) {
	s.threadAction(w, r, "", func(ctx context.Context, id omni.ThreadID) error { return s.opts.Chat.MarkRead(ctx, id) }, "Marked as read.")
}

func (s *Server) chatClose(w http.ResponseWriter, r *http.Request) {
	s.threadAction(w, r, "Close this thread? The contact's next message opens it again.",
		func(ctx context.Context, id omni.ThreadID) error { return s.opts.Chat.CloseThread(ctx, id) }, "Thread closed.")
}

// threadAction runs a thread's state change; question, when set, asks first.
func (s *Server) threadAction(w http.ResponseWriter, r *http.Request, question string, act func(context.Context, omni.ThreadID) error, ok string) {
	id, _ := pathInt(r, "id")
	self := "/admin/chat/threads/" + strconv.FormatInt(id, 10)
	if !s.parseForm(w, r, self) {
		return
	}
	back := backTo(r, self)
	if s.opts.Chat == nil {
		s.done(w, r, back, false, "The chat platform is not wired in this process.")
		return
	}
	if question != "" && !s.confirmed(w, r, "chat", question, "Yes", back) {
		return
	}
	if err := act(r.Context(), omni.ThreadID(id)); err != nil {
		s.actionFailed(w, r, back, err, errors.Is(err, omni.ErrThreadNotFound))
		return
	}
	s.done(w, r, back, true, ok)
}
