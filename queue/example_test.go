package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/floodgate/floodgate/queue"
)

// A queue in front of a budget of one unit: the first caller gets it, the
// second would have to wait a minute for the next unit, longer than its
// deadline allows, so it leaves at once with a TimeoutError.
func Example() {
	var mu sync.Mutex
	units := 1
	try := func(context.Context) (bool, time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		if units > 0 {
			units--
			return true, 0, nil
		}
		return false, time.Minute, nil // e.g. a Decision's RetryAfter
	}
	q, err := queue.New(try, queue.WithSize(100), queue.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	fmt.Println("first:", q.Wait(context.Background(), 0))
	err = q.Wait(context.Background(), 0)
	var te *queue.TimeoutError
	fmt.Println("second timed out:", errors.Is(err, queue.ErrTimeout), errors.As(err, &te) && te.RetryAfter == time.Minute)
	fmt.Printf("%+v\n", q.Stats())
	// Output:
	// first: <nil>
	// second timed out: true true
	// {Waiting:0 Admitted:1 Rejected:0 TimedOut:1 Canceled:0 Failed:0}
}
