package chaos

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/chaos/history"
)

// An attempt that begins after its client's return still counts when no
// gateway answered: a gateway goes on with a request whose client (or the
// balancer) has gone, so a copy whose attempt began 0.4 s after the client
// saw EOF through the balancer was sent (seed 1796666188590256824). A
// gateway's own answer ends the window; an attempt begun before the op was
// sent is another's.
func TestAttemptBeganWhileTheOpCouldBeSent(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	begun := attemptBegins{"chaos-c/dir/k3 copy": {ms(1400)}}
	cut := history.Op{Key: "chaos-c/dir/k3", Gateway: history.Balancer, Invoke: ms(559), Return: ms(1003)}
	if !begun.any(cut.Key, "copy", cut.Invoke, sentUntil(cut)) {
		t.Error("the copy begun after its client's cut return was declared never sent")
	}
	answered := history.Op{Key: "chaos-c/dir/k3", Gateway: 1, Invoke: ms(559), Return: ms(1003), Answered: true}
	if begun.any(answered.Key, "copy", answered.Invoke, sentUntil(answered)) {
		t.Error("an attempt begun after the gateway answered counted as the op's")
	}
	later := history.Op{Key: "chaos-c/dir/k3", Gateway: history.Balancer, Invoke: ms(1600), Return: ms(1700)}
	if begun.any(later.Key, "copy", later.Invoke, sentUntil(later)) {
		t.Error("an attempt begun before the op was sent counted as the op's")
	}
	if begun.any(cut.Key, "delete", cut.Invoke, sentUntil(cut)) || begun.any("chaos-c/k0", "copy", cut.Invoke, sentUntil(cut)) {
		t.Error("an attempt of another kind, or on another key, counted")
	}
}
