//! `demo-httpserver-c`: the forking C server of `c/server.c`, started from Rust so that cargo
//! builds it next to the Rust one.
use std::ffi::{c_char, c_int, CString};
use std::os::unix::ffi::OsStrExt;

extern "C" {
    fn demo_httpserver_c_main(port: u16, root: *const c_char) -> c_int;
}

fn main() {
    let args = demo_httpserver::Args::from_env();
    let root = CString::new(args.root.as_os_str().as_bytes()).unwrap_or_else(|_| {
        eprintln!("--root must not contain NUL");
        std::process::exit(2)
    });
    // SAFETY: `root` is a valid NUL-terminated string that outlives the call (which never
    // returns unless the server fails to start).
    let code = unsafe { demo_httpserver_c_main(args.port, root.as_ptr()) };
    std::process::exit(code);
}
