package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// client calls the instance's public paths: the admin API with the admin
// token, the /bot/* contract with the bot secret.
type client struct {
	base       string
	adminToken string
	botSecret  string
	hc         *http.Client
}

// stepKey carries, in a journey's context, what to call on every answer of
// the instance: a journey that gets answers is moving (see awaitJourneys).
type stepKey struct{}

func withStep(ctx context.Context, step func()) context.Context {
	return context.WithValue(ctx, stepKey{}, step)
}

func newClient(opts Opts) *client {
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{
			Timeout:   20 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		}
	}
	return &client{base: strings.TrimRight(opts.BaseURL, "/"), adminToken: opts.AdminToken, botSecret: opts.BotSecret, hc: hc}
}

// apiError is a non-2xx answer in the instance's error shape.
type apiError struct {
	Method, Path string
	Status       int
	Code         string
	Message      string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// statusOf is the HTTP status of an apiError, 0 for any other error.
func statusOf(err error) int {
	var e *apiError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// codeOf is the error code of an apiError, "" for any other error.
func codeOf(err error) string {
	var e *apiError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// admin calls path under /admin/api.
func (c *client) admin(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, c.adminToken, method, "/admin/api"+path, in, out)
}

// bot calls a route of the /bot/* contract.
func (c *client) bot(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, c.botSecret, method, path, in, out)
}

func (c *client) do(ctx context.Context, token, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// Not the url.Error's text: it repeats the URL with its ids.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("request failed: %w", err)
	}
	defer resp.Body.Close()
	if step, ok := ctx.Value(stepKey{}).(func()); ok {
		step() // any answer, an error status too
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		e := &apiError{Method: method, Path: pathOnly(path), Status: resp.StatusCode}
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &eb) == nil {
			e.Code, e.Message = eb.Error.Code, eb.Error.Message
		}
		return e
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, pathOnly(path), err)
	}
	return nil
}

// pathOnly drops the query, which may carry ids the logs need not repeat.
func pathOnly(p string) string {
	path, _, _ := strings.Cut(p, "?")
	return path
}
