package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// client calls the instance's HTTP API.
type client struct {
	base, admin string
	http        *http.Client
}

// do sends body (JSON-encoded unless it is []byte; as application/json
// unless header says otherwise) and decodes a 2xx answer
// into out (when not nil). A non-2xx answer is a statusError.
func (c *client) do(ctx context.Context, method, path string, header http.Header, body, out any) error {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if rd != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return statusError{resp.StatusCode}
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

// adminDo is do with the admin token.
func (c *client) adminDo(ctx context.Context, method, path string, body, out any) error {
	return c.do(ctx, method, path, http.Header{"Authorization": {"Bearer " + c.admin}}, body, out)
}
