// A net/http server for the function-probe tests: prints its port, then serves
//   /deep?n=N  recursion N deep with a stack frame big enough to make the goroutine's stack
//              grow (the runtime copies it: a return probe would crash the program here);
//   /block?id=N  blocker(N): parks the goroutine on a channel mid-call (a timer answers it), so
//              it resumes on whichever thread the scheduler picks; answers "block N <ns>", the
//              nanoseconds blocker measured itself;
//   anything else: "ok <path>".
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// blocker returns its id after waiting on a channel that another goroutine answers: the
// goroutine parks mid-call and may come back on another OS thread.
//
//go:noinline
func blocker(id int, took *int64) int {
	t0 := time.Now()
	done := make(chan int)
	go func() {
		time.Sleep(200 * time.Microsecond)
		done <- id
	}()
	got := <-done
	*took = int64(time.Since(t0))
	return got
}

//go:noinline
func deep(n int) int {
	var pad [512]byte
	pad[n%512] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n%512])
}

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	http.HandleFunc("/deep", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		fmt.Fprintf(w, "deep %d\n", deep(n))
	})
	http.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.Atoi(r.URL.Query().Get("id"))
		var took int64
		got := blocker(id, &took)
		fmt.Fprintf(w, "block %d %d\n", got, took)
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	})
	http.Serve(ln, nil)
}
