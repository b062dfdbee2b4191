// A net/http server for the function-probe tests: prints its port, then serves
//   /deep?n=N  recursion N deep with a stack frame big enough to make the goroutine's stack
//              grow (the runtime copies it: a return probe would crash the program here);
//   anything else: "ok <path>".
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
)

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
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	})
	http.Serve(ln, nil)
}
