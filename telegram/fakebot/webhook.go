package fakebot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// startDeliverer starts the goroutine that posts b's updates to its webhook,
// one at a time and in order; call with s.mu held.
func (s *Server) startDeliverer(b *botState) {
	ctx, cancel := context.WithCancel(s.ctx)
	b.hook.stop = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.deliver(ctx, b)
	}()
}

// stopWebhook stops the deliverer, if one runs; call with s.mu held.
func (b *botState) stopWebhook() {
	if b.hook.stop != nil {
		b.hook.stop()
		b.hook.stop = nil
	}
}

// deliver posts the oldest pending update until the webhook answers 2xx,
// waiting WebhookRetryMin, then twice as long each time up to
// WebhookRetryMax, between failures, as Telegram keeps retrying.
func (s *Server) deliver(ctx context.Context, b *botState) {
	wait := s.opts.WebhookRetryMin
	for {
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			return
		}
		if len(b.updates) == 0 {
			wake := b.wake
			s.mu.Unlock()
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		u := b.updates[0]
		body, err := json.Marshal(u)
		url, secret := b.hook.url, b.hook.secret
		s.mu.Unlock()
		if err != nil {
			panic("fakebot: marshal update: " + err.Error())
		}

		err = s.post(ctx, url, secret, body)

		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			return
		}
		if err == nil {
			if len(b.updates) > 0 && b.updates[0].UpdateID == u.UpdateID {
				b.updates = b.updates[1:]
			}
			wait = s.opts.WebhookRetryMin
		} else {
			b.hook.lastErrorDate = s.now().Unix()
			b.hook.lastErrorMsg = err.Error()
		}
		s.signal()
		s.mu.Unlock()
		if err != nil {
			s.log.Debug("fakebot webhook delivery failed", "bot_id", b.me.ID, "update_id", u.UpdateID, "error", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			wait = min(2*wait, s.opts.WebhookRetryMax)
		}
	}
}

// Telegram's own words for a failed delivery, which getWebhookInfo reports
// as last_error_message.
const (
	lastErrorConnection = "Connection failed"
	lastErrorResponse   = "Wrong response from the webhook"
)

// post sends one update as Telegram does and fails on anything but 2xx.
func (s *Server) post(ctx context.Context, url, secret string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	res, err := s.opts.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", lastErrorConnection, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	_ = res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("%s: %s", lastErrorResponse, res.Status)
	}
	return nil
}
