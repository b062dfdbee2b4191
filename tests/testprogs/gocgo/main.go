// A cgo program for the function-probe tests: C's cmul(i, 3) called from Go five times.
// cmul is C code in a Go binary: its arguments are in the SysV registers, not Go's.
package main

/*
__attribute__((noinline)) long cmul(long a, long b) { return a * b; }
*/
import "C"
import "fmt"

func main() {
	var total int64
	for i := 0; i < 5; i++ {
		total += int64(C.cmul(C.long(i), 3))
	}
	fmt.Println(total)
}
