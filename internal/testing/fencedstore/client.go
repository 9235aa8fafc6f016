package fencedstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client writes to one resource of a Store over HTTP. It is safe for concurrent use.
type Client struct {
	hc  *http.Client
	url string
}

// NewClient returns a Client for the resource at resourceURL, e.g.
// "http://fenced:8080/v1/resources/orders". A nil hc means http.DefaultClient.
func NewClient(resourceURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{hc: hc, url: strings.TrimRight(resourceURL, "/")}
}

// Write sends w. An accepted write returns its Result and nil; a rejected one its Result and an
// error matching ErrRejected; any other failure an error and a zero Result.
func (c *Client) Write(ctx context.Context, w Write) (Result, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return Result{}, fmt.Errorf("fencedstore: encode the write: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/writes", bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("fencedstore: write to %s: %w", c.url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("fencedstore: write to %s: %w", c.url, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
	}()
	var res Result
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return Result{}, fmt.Errorf("fencedstore: write to %s: %s: %s", c.url, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return Result{}, fmt.Errorf("fencedstore: write to %s: decode the answer: %w", c.url, err)
	}
	if resp.StatusCode == http.StatusConflict {
		return res, fmt.Errorf("%w (%s)", ErrRejected, res.Error)
	}
	return res, nil
}
