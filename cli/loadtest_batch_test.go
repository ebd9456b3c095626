package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"switchyard/store/storetest"
)

// TestLoadtestBatches: loadtest --batch publishes the topic path's records
// in JSON-lines batches: every record is accepted, counted as a record, and
// in the topic; the referral consumer still handles the probed ones.
func TestLoadtestBatches(t *testing.T) {
	t.Parallel()
	p := start(t, storetest.Source(t))
	waitHealthy(t, p.base)
	out, code := runBinary(t, []string{"SWITCHYARD_ADMIN_TOKEN=" + p.token}, "loadtest", "--url", p.base,
		"--paths", "topic", "--count", "1203", "--batch", "500", "--drain", "60s")
	if code != 0 || !regexp.MustCompile(`(?m)^topic\s+1203\s+1203\s.*none$`).MatchString(out) {
		t.Fatalf("loadtest --batch 500: exit %d, want 0 and 1203 of 1203 records accepted without errors:\n%s", code, out)
	}
	if !strings.Contains(out, "500 records a request") {
		t.Errorf("the report does not say the records went in batches:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^topic\s+(\d+) measured`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" {
		t.Errorf("no accepted → handled probe was measured:\n%s", out)
	}

	records := loadtestRecords(t, p)
	// The run's records and its two links' owners, published singly.
	if want := 1203 + 2; records != want {
		t.Fatalf("the run added %d records to the topic, want %d", records, want)
	}
}

// loadtestRecords counts the identity topic's records that a loadtest
// run published (their correlationId says so), read through the admin API.
func loadtestRecords(t *testing.T, p *process) int {
	t.Helper()
	n := 0
	for part := range 6 {
		for from := 0; ; {
			req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/admin/api/topics/pin.identity.users.v1/messages?partition=%d&fromOffset=%d&limit=1000", p.base, part, from), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+p.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var page struct {
				Messages []struct {
					Offset int `json:"offset"`
					Value  struct {
						CorrelationID string `json:"correlationId"`
					} `json:"value"`
				} `json:"messages"`
			}
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("read partition %d: %d %v", part, resp.StatusCode, err)
			}
			if len(page.Messages) == 0 {
				break
			}
			for _, m := range page.Messages {
				if strings.HasPrefix(m.Value.CorrelationID, "loadtest-") {
					n++
				}
			}
			from = page.Messages[len(page.Messages)-1].Offset + 1
		}
	}
	return n
}
