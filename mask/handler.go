package mask

import (
	"context"
	"fmt"
	"log/slog"
)

// NewHandler returns a slog.Handler that masks phone numbers in every record
// before next sees it: the message by Phones, each string attribute (in
// groups too, and errors and Stringers by their text) by Field under its
// key. Numbers, times and the other kinds pass as they are, so a chat id
// logged as an int64 stays whole. The logs never depend on a call site
// remembering to mask.
func NewHandler(next slog.Handler) slog.Handler { return &handler{next: next} }

type handler struct{ next slog.Handler }

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Phones(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(maskAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		masked[i] = maskAttr(a)
	}
	return &handler{next: h.next.WithAttrs(masked)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name)}
}

func maskAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Field(a.Key, v.String()))
	case slog.KindGroup:
		group := v.Group()
		masked := make([]slog.Attr, len(group))
		for i, g := range group {
			masked[i] = maskAttr(g)
		}
		a.Value = slog.GroupValue(masked...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			a.Value = slog.StringValue(Field(a.Key, x.Error()))
		case fmt.Stringer:
			a.Value = slog.StringValue(Field(a.Key, x.String()))
		default:
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}
