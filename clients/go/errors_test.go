package unique

import (
	"errors"
	"testing"
)

// The kind is the body's error code; the status decides only when the body names none.
func TestErrorsAreChosenByTheBodysCode(t *testing.T) {
	cases := []struct {
		route  string
		status int
		body   string
		want   error
	}{
		{routeClaim, 409, `{"error":"superseded","message":"m","gen":1,"current_gen":2}`, ErrSuperseded},
		{routeClaim, 409, `{"error":"too_many_slots","message":"m","limit":16}`, ErrTooManySlots},
		{routeClaim, 409, `{"error":"limit_reached","message":"m","limit":3,"sessions":[]}`, ErrLimitReached},
		{routeClaim, 409, `{"error":"some_later_code"}`, ErrConflict},
		{routeClaim, 409, `not json`, ErrSuperseded},
		{routeRelease, 409, ``, ErrConflict},
		{routeClaim, 400, `{"error":"invalid_params","message":"uid must be >= 1"}`, ErrInvalidParams},
		{routeClaim, 401, `{"error":"unauthenticated"}`, ErrUnauthenticated},
		{routeClaim, 401, ``, ErrUnauthenticated},
		{routeClaim, 403, `{"error":"forbidden"}`, ErrForbidden},
		{routeClaim, 429, `{"error":"throttled"}`, ErrThrottled},
		{routeClaim, 503, `{"error":"unavailable"}`, ErrUnavailable},
		{routeClaim, 502, `<html>`, ErrUnavailable},
		{routeLeaseEnsure, 500, `{"error":"corrupt"}`, ErrCorrupt},
		{routeLeaseEnsure, 501, `{"error":"not_implemented"}`, ErrNotImplemented},
		{routeClaim, 413, ``, ErrTooLarge},
	}
	for _, c := range cases {
		err := answerError(c.route, c.status, []byte(c.body))
		if !errors.Is(err, c.want) {
			t.Errorf("%s %d %s: %v, want %v", c.route, c.status, c.body, err, c.want)
		}
		if retry := c.want == ErrThrottled || c.want == ErrUnavailable; err.Retryable() != retry {
			t.Errorf("%s %d %s: retryable %v", c.route, c.status, c.body, err.Retryable())
		}
	}
	superseded := answerError(routeClaim, 409, []byte(`{"error":"superseded","gen":1,"current_gen":2}`))
	slots := answerError(routeClaim, 409, []byte(`{"error":"too_many_slots","limit":16}`))
	if superseded.Gen != 1 || superseded.CurrentGen != 2 || slots.Limit != 16 {
		t.Fatalf("%+v %+v", superseded, slots)
	}
}
