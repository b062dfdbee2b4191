//! Both demo servers answer 200 requests right: 200 for files (with the MIME type), 404 for
//! missing ones, 405 for POST, and survive malformed requests and concurrent clients.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;
use usdt_trace_tests::markers::*;
use usdt_trace_tests::proc;

/// One request on its own connection; returns (status, head, body).
fn request(port: u16, raw: &str) -> (u16, String, Vec<u8>) {
    let r = http_request(port, raw);
    (r.status.unwrap_or(0), r.head, r.body)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
}

fn check_server(bin: &Path) {
    let port = free_port();
    let server = start_server(bin, port, None);
    let index =
        std::fs::read(workspace_root().join("demo-httpserver/www/index.html")).expect("www");

    // 200 requests from 4 concurrent clients, a mix of hits, misses and bad methods.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let index = index.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    match (t * 50 + i) % 5 {
                        0 => {
                            let (st, head, body) = request(port, &get("/"));
                            assert_eq!(st, 200, "{head}");
                            assert!(head
                                .to_ascii_lowercase()
                                .contains("content-type: text/html"));
                            assert_eq!(body, index);
                        }
                        1 => {
                            let (st, head, _) = request(port, &get("/data.json"));
                            assert_eq!(st, 200, "{head}");
                            assert!(head.to_ascii_lowercase().contains("application/json"));
                        }
                        2 => {
                            let (st, head, _) = request(port, &get("/hello.txt?x=1"));
                            assert_eq!(st, 200, "{head}");
                            assert!(head.to_ascii_lowercase().contains("text/plain"));
                        }
                        3 => assert_eq!(request(port, &get("/no/such/file.html")).0, 404),
                        _ => {
                            let raw = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\
                                       Connection: close\r\n\r\n";
                            let (st, head, _) = request(port, raw);
                            assert_eq!(st, 405, "{head}");
                            assert!(head.to_ascii_lowercase().contains("allow: get, head"));
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }

    // Escapes and garbage: never a 200, never a crash.
    assert_ne!(request(port, &get("/../../../etc/passwd")).0, 200);
    assert_ne!(request(port, &get("/%2e%2e/%2e%2e/etc/passwd")).0, 200);
    let _ = request(port, "GARBAGE\r\n\r\n");
    let _ = request(port, "GET\r\n\r\n");
    let _ = request(port, &"A".repeat(20000));
    let (st, _, body) = request(
        port,
        "HEAD /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((st, body.len()), (200, 0));

    // Keep-alive: two requests on one connection.
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut all = String::new();
    let _ = s.read_to_string(&mut all);
    assert_eq!(all.matches("HTTP/1.1 200 OK").count(), 2, "{all}");

    assert_eq!(request(port, &get("/")).0, 200, "still serving");

    // Forked children are reaped: no zombies left behind (reaping follows each child's exit
    // asynchronously, so give it a bounded while).
    let pid = server.0.id();
    let mut zombies = Vec::new();
    proc::wait_until("forked children reaped", Duration::from_secs(10), || {
        zombies = zombie_children(pid);
        zombies.is_empty()
    });
}

fn zombie_children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 1 && f[0] == "Z" && f[1] == parent.to_string() {
            out.push(entry.file_name().to_string_lossy().parse().unwrap_or(0));
        }
    }
    out
}

#[test]
fn both_demo_servers_serve_200_requests() {
    let (rust, c) = demo_servers();
    check_server(rust);
    check_server(c);
}
