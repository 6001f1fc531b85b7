package capi

import (
	"context"
	"errors"
	"testing"
)

// blocking is exercised with a fake plugin call that waits on channels, so
// the order of events is fixed without timing.
func TestBlockingAbandonsAndFrees(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	freed := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := blocking(ctx, "fake", func() (int, error) {
		close(started)
		<-release
		return 42, nil
	}, func(v int) { freed <- v })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	close(release) // the "plugin call" ends after the caller gave up
	if v := <-freed; v != 42 {
		t.Errorf("abandon got %d, want the late result 42", v)
	}
}

func TestBlockingPassesResults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sentinel := errors.New("plugin failed")
	for _, c := range []context.Context{context.Background(), ctx} {
		v, err := blocking(c, "fake", func() (int, error) { return 7, nil }, func(int) { t.Error("abandon called on success") })
		if v != 7 || err != nil {
			t.Errorf("got %d, %v", v, err)
		}
		_, err = blocking(c, "fake", func() (int, error) { return 0, sentinel }, nil)
		if !errors.Is(err, sentinel) {
			t.Errorf("error %v not passed through", err)
		}
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	ran := false
	if _, err := blocking(done, "fake", func() (int, error) { ran = true; return 0, nil }, nil); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("already-cancelled context: err %v, ran %v", err, ran)
	}
}
