/*
 * A classic forking HTTP/1.x file server, instrumented with usdt_markers.h.
 *
 * The parent accepts connections and forks one child per connection; the child serves requests
 * on it (keep-alive for HTTP/1.1) with sendfile() and exits. SIGCHLD reaps the children.
 *
 * Probes (provider httpserver), the same as the Rust server's:
 *   request__start(span_id, parent_id = 0, req_id)
 *   request__end(span_id, status, bytes)
 *   send_message__start(span_id, parent_id = request span id, req_id)
 *   send_message__end(span_id, bytes)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "usdt_markers.h"

#define REQ_MAX 8192

enum method { M_GET, M_HEAD, M_OTHER, M_BAD };

struct request {
    enum method method;
    char path[PATH_MAX];
    int keep_alive;
};

static const char *doc_root;

static void on_sigchld(int sig)
{
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static enum method parse_method(const char *s, size_t len)
{
    if (len == 3 && !memcmp(s, "GET", 3))
        return M_GET;
    if (len == 4 && !memcmp(s, "HEAD", 4))
        return M_HEAD;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 'A' || s[i] > 'Z')
            return M_BAD;
    return len ? M_OTHER : M_BAD;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Parses the request line and the headers we care about from buf[0..len). Returns 0 on success,
 * -1 if malformed. The path is percent-decoded, stripped of the query, and refused if it could
 * leave the document root. */
static int parse(const char *buf, size_t len, struct request *req)
{
    const char *end = buf + len;
    const char *sp1 = memchr(buf, ' ', len);
    if (!sp1)
        return -1;
    req->method = parse_method(buf, (size_t)(sp1 - buf));
    if (req->method == M_BAD)
        return -1;
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', (size_t)(end - target));
    if (!sp2 || sp2 == target || *target != '/')
        return -1;
    const char *version = sp2 + 1;
    const char *eol = memchr(version, '\r', (size_t)(end - version));
    if (!eol || eol - version != 8 || memcmp(version, "HTTP/1.", 7))
        return -1;
    req->keep_alive = version[7] == '1';

    size_t o = 0;
    for (const char *p = target; p < sp2 && *p != '?' && *p != '#'; p++) {
        int c = (unsigned char)*p;
        if (c == '%') {
            int hi = p + 2 < sp2 ? hexval(p[1]) : -1, lo = p + 2 < sp2 ? hexval(p[2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            p += 2;
        }
        if (c == 0 || o + 1 >= sizeof req->path)
            return -1;
        req->path[o++] = (char)c;
    }
    req->path[o] = 0;
    if (strstr(req->path, "/../") || (o >= 3 && !strcmp(req->path + o - 3, "/..")))
        return -1;

    /* Headers: only Connection matters. */
    for (const char *line = eol + 2; line < end;) {
        const char *le = memchr(line, '\r', (size_t)(end - line));
        if (!le || le == line)
            break;
        if ((size_t)(le - line) >= 11 && !strncasecmp(line, "connection:", 11)) {
            const char *v = line + 11;
            while (v < le && *v == ' ')
                v++;
            if ((size_t)(le - v) >= 5 && !strncasecmp(v, "close", 5))
                req->keep_alive = 0;
            else if ((size_t)(le - v) >= 10 && !strncasecmp(v, "keep-alive", 10))
                req->keep_alive = 1;
        }
        line = le + 2;
    }
    return 0;
}

static const char *mime_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {"html", "text/html; charset=utf-8"},
        {"htm", "text/html; charset=utf-8"},
        {"css", "text/css; charset=utf-8"},
        {"js", "text/javascript; charset=utf-8"},
        {"json", "application/json"},
        {"txt", "text/plain; charset=utf-8"},
        {"png", "image/png"},
        {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},
        {"svg", "image/svg+xml"},
        {"ico", "image/x-icon"},
        {"wasm", "application/wasm"},
        {"pdf", "application/pdf"},
    };
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(path, '.');
    if (dot && (!slash || dot > slash)) {
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (!strcasecmp(dot + 1, types[i].ext))
                return types[i].type;
    }
    return "application/octet-stream";
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sends headers and a body (from file_fd with sendfile, or the string `body`). Returns the
 * number of body bytes written (what both servers report as "bytes"), or -1. */
static long long send_message(int fd, uint64_t parent, uint64_t req_id, int status,
                              const char *reason, const char *type, const char *extra,
                              int file_fd, off_t size, const char *body, int head, int keep_alive)
{
    uint64_t sid = USDT_ENABLED(httpserver, send_message) ? usdt_next_span_id() : 0;
    USDT_SPAN_START(httpserver, send_message, sid, parent, req_id);
    long long sent = 0;
    char hdr[512];
    /* Cork so the headers and the sendfile() body leave in full segments: otherwise the
     * header-only segment meets the client's delayed ACK and every response waits ~40 ms. */
    int cork_on = 1, cork_off = 0;
    setsockopt(fd, IPPROTO_TCP, TCP_CORK, &cork_on, sizeof cork_on);
    int n = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nServer: demo-httpserver-c\r\nContent-Type: %s\r\n"
                     "Content-Length: %lld\r\nConnection: %s\r\n%s\r\n",
                     status, reason, type, (long long)size, keep_alive ? "keep-alive" : "close",
                     extra ? extra : "");
    if (n < 0 || (size_t)n >= sizeof hdr || write_all(fd, hdr, (size_t)n) < 0) {
        sent = -1;
        goto out;
    }
    sent = 0;
    if (!head) {
        if (file_fd >= 0) {
            off_t off = 0;
            while (off < size) {
                ssize_t w = sendfile(fd, file_fd, &off, (size_t)(size - off));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0) {
                    sent = -1;
                    goto out;
                }
                sent += w;
            }
        } else if (body) {
            if (write_all(fd, body, (size_t)size) < 0) {
                sent = -1;
                goto out;
            }
            sent += size;
        }
    }
out:
    setsockopt(fd, IPPROTO_TCP, TCP_CORK, &cork_off, sizeof cork_off);
    USDT_SPAN_END(httpserver, send_message, sid, (uint64_t)(sent < 0 ? 0 : sent));
    return sent;
}

static const char NOT_FOUND[] = "<!DOCTYPE html><title>404 Not Found</title><h1>404 Not Found</h1>\n";
static const char NOT_ALLOWED[] =
    "<!DOCTYPE html><title>405 Method Not Allowed</title><h1>405 Method Not Allowed</h1>\n";
static const char BAD_REQUEST[] =
    "<!DOCTYPE html><title>400 Bad Request</title><h1>400 Bad Request</h1>\n";

/* Serves one parsed (or unparsable, req == NULL) request. Returns bytes sent or -1. */
static long long respond(int fd, uint64_t sid, uint64_t req_id, const struct request *req,
                         int *status)
{
    const char *html = "text/html; charset=utf-8";
    if (!req) {
        *status = 400;
        return send_message(fd, sid, req_id, 400, "Bad Request", html, NULL, -1,
                            sizeof BAD_REQUEST - 1, BAD_REQUEST, 0, 0);
    }
    int head = req->method == M_HEAD;
    if (req->method == M_OTHER) {
        *status = 405;
        return send_message(fd, sid, req_id, 405, "Method Not Allowed", html,
                            "Allow: GET, HEAD\r\n", -1, sizeof NOT_ALLOWED - 1, NOT_ALLOWED, 0,
                            req->keep_alive);
    }
    char full[PATH_MAX * 2];
    size_t plen = strlen(req->path);
    int n = snprintf(full, sizeof full, "%s%s%s", doc_root, req->path,
                     plen && req->path[plen - 1] == '/' ? "index.html" : "");
    int file_fd = -1;
    struct stat st;
    if (n > 0 && (size_t)n < sizeof full) {
        file_fd = open(full, O_RDONLY | O_CLOEXEC);
        if (file_fd >= 0 && (fstat(file_fd, &st) < 0 || !S_ISREG(st.st_mode))) {
            close(file_fd);
            file_fd = -1;
        }
    }
    if (file_fd < 0) {
        *status = 404;
        return send_message(fd, sid, req_id, 404, "Not Found", html, NULL, -1,
                            sizeof NOT_FOUND - 1, NOT_FOUND, head, req->keep_alive);
    }
    *status = 200;
    long long sent = send_message(fd, sid, req_id, 200, "OK", mime_type(full), NULL, file_fd,
                                  st.st_size, NULL, head, req->keep_alive);
    close(file_fd);
    return sent;
}

/* The child: serves requests on one connection until it closes or asks to. */
static void serve_connection(int fd)
{
    char buf[REQ_MAX + 1];
    size_t have = 0;
    uint64_t n = 0;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
        char *hdr_end;
        buf[have] = 0;
        while (!(hdr_end = memmem(buf, have, "\r\n\r\n", 4)) && have < REQ_MAX) {
            ssize_t r = read(fd, buf + have, REQ_MAX - have);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return;
            have += (size_t)r;
        }
        uint64_t req_id = ((uint64_t)getpid() << 32) | ++n;
        uint64_t sid = USDT_ENABLED(httpserver, request) ? usdt_next_span_id() : 0;
        USDT_SPAN_START(httpserver, request, sid, (uint64_t)0, req_id);
        struct request req;
        int ok = hdr_end && parse(buf, (size_t)(hdr_end + 4 - buf), &req) == 0;
        int status = 0;
        long long sent = respond(fd, sid, req_id, ok ? &req : NULL, &status);
        USDT_SPAN_END(httpserver, request, sid, (uint16_t)status,
                      (uint64_t)(sent < 0 ? 0 : sent));
        if (!ok || sent < 0 || !req.keep_alive)
            return;
        /* Request bodies are not expected (GET/HEAD); keep any pipelined bytes. */
        size_t used = (size_t)(hdr_end + 4 - buf);
        memmove(buf, buf + used, have - used);
        have -= used;
    }
}

int demo_httpserver_c_main(unsigned short port, const char *root)
{
    doc_root = root;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigchld;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        perror("socket");
        return 1;
    }
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 512) < 0) {
        perror("bind/listen");
        return 1;
    }
    fprintf(stderr, "demo-httpserver-c: serving %s on http://127.0.0.1:%u/\n", root, port);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            perror("accept");
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(lfd);
            serve_connection(fd);
            shutdown(fd, SHUT_WR);
            close(fd);
            _exit(0);
        }
        if (pid < 0)
            perror("fork");
        close(fd);
    }
}
