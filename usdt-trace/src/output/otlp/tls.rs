//! TLS for an `https://` endpoint: the certificates `--otlp-ca` names (read from a regular file
//! of bounded size), the verifier, the connector that hands ureq our rustls configuration, and
//! the reasons a collector's certificate was not accepted, in words.
//!
//! The verifier is rustls' own (webpki) with one addition: a collector whose certificate is
//! exactly one the `--otlp-ca` file holds is accepted once its validity period and host name
//! check out, as `curl --cacert` accepts it (OpenSSL takes any certificate of that file as a
//! trust anchor, "partial chains"). webpki refuses it: the usual self-signed certificate
//! (`openssl req -x509`) says CA:TRUE, and a CA is never a server's own there.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
    TransportAdapter,
};

/// The largest `--otlp-ca` file read: Mozilla's whole root store is ~220 KB of PEM.
pub const MAX_CA_FILE: u64 = 4 << 20;

/// The certificates of `--otlp-ca` (DER), trusted instead of the system's.
#[derive(Clone, Default)]
pub struct CaCerts(pub Arc<Vec<Vec<u8>>>);

impl std::fmt::Debug for CaCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CaCerts({} certificates)", self.0.len())
    }
}

/// `--otlp-ca FILE` (or the variable `src`) that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{src} {path}: {why}")]
pub struct CaError {
    pub src: &'static str,
    pub path: String,
    pub why: String,
}

/// The PEM certificates in `path`: at least one, each a parseable certificate.
pub fn load_ca(src: &'static str, path: &Path) -> Result<CaCerts, CaError> {
    let err = |why: String| CaError {
        src,
        path: crate::util::terminal::clean(&path.display().to_string()).into_owned(),
        why,
    };
    let pem = read_small_file(path, MAX_CA_FILE).map_err(err)?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c.der().to_vec()),
            Ok(_) => {}
            Err(e) => return Err(err(format!("not a PEM certificate file ({e})"))),
        }
    }
    if certs.is_empty() {
        return Err(err(
            "no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    for c in &certs {
        // Parsed now, so that a damaged file fails here, not at the first POST.
        let root = CertificateDer::from(c.as_slice());
        let mut store = rustls::RootCertStore::empty();
        store
            .add(root)
            .map_err(|e| err(format!("not a usable CA certificate ({e})")))?;
    }
    Ok(CaCerts(Arc::new(certs)))
}

/// A regular file of at most `max` bytes, whole. Opened without blocking (a FIFO would wait
/// for a writer), its type checked on the open descriptor before any read (a device such as
/// /dev/zero never ends), and read no further than `max` (it may grow meanwhile).
fn read_small_file(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let too_big = || {
        format!(
            "larger than {} MiB: not a PEM file of certificates",
            max >> 20
        )
    };
    if meta.len() > max {
        return Err(too_big());
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() as u64 > max {
        return Err(too_big());
    }
    Ok(buf)
}

/// The rustls configuration: trust `ca` (every certificate of it a trust anchor, and each also
/// accepted as the collector's very own), else the system's store (Mozilla's roots, built in,
/// when it is empty).
fn client_config(ca: Option<&CaCerts>) -> Result<ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Verifier::new(ca, provider.clone())?;
    Ok(ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

impl Verifier {
    fn new(ca: Option<&CaCerts>, provider: Arc<CryptoProvider>) -> Result<Verifier, rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        let given: Vec<Vec<u8>> = match ca {
            Some(ca) => {
                roots.add_parsable_certificates(
                    ca.0.iter().map(|d| CertificateDer::from(d.as_slice())),
                );
                ca.0.to_vec()
            }
            None => {
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                if roots.is_empty() {
                    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                }
                Vec::new()
            }
        };
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        Ok(Verifier {
            webpki,
            given,
            ca_given: ca.is_some(),
            algs: provider.signature_verification_algorithms,
        })
    }
}

/// rustls' verifier, and the certificates given to accept as they are.
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The `--otlp-ca` certificates (DER), none with the system's store.
    given: Vec<Vec<u8>>,
    ca_given: bool,
    algs: WebPkiSupportedAlgorithms,
}

/// Why a certificate is not trusted, where rustls' own reason would mislead: webpki reports a
/// self-signed certificate it does not know as signed by an unknown authority, as a CA used as
/// a server's own, or, when a given CA has the same name, as a bad signature.
#[derive(Debug, thiserror::Error)]
enum Untrusted {
    #[error("not trusted: self-signed, and not the certificate given to --otlp-ca")]
    SelfSignedNotGiven,
    #[error("not trusted: self-signed; give it to --otlp-ca to trust it")]
    SelfSigned,
}

fn invalid(e: CertificateError) -> rustls::Error {
    rustls::Error::InvalidCertificate(e)
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let err = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let facts = der::facts(end_entity.as_ref());
        if self.given.iter().any(|c| c[..] == end_entity[..]) {
            // The very certificate the user trusts: its key signs the handshake (checked
            // below, as for any), so only its period and its name are left to check.
            let f = facts.ok_or(invalid(CertificateError::BadEncoding))?;
            let now = now.as_secs() as i64;
            if now < f.not_before {
                return Err(invalid(CertificateError::NotValidYet));
            }
            if now > f.not_after {
                return Err(invalid(CertificateError::Expired));
            }
            let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&parsed, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        use CertificateError as C;
        match &err {
            // Said as they are: true whoever signed it.
            rustls::Error::InvalidCertificate(
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. }
                | C::NotValidForName
                | C::NotValidForNameContext { .. },
            ) => Err(err),
            _ if facts.is_some_and(|f| f.issuer == f.subject) => {
                let why = if self.ca_given {
                    Untrusted::SelfSignedNotGiven
                } else {
                    Untrusted::SelfSigned
                };
                Err(invalid(C::Other(rustls::OtherError(Arc::new(why)))))
            }
            _ => Err(err),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// TLS over whatever ureq connected (TCP, or a tunnel through an HTTPS_PROXY), with our
/// verifier: ureq's own connector builds its rustls configuration from root certificates
/// alone. The name checked is the endpoint's host (the only URL this agent posts to).
#[derive(Debug)]
pub(super) struct TlsConnector {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnector {
    pub(super) fn new(host: &str, ca: Option<&CaCerts>) -> Result<TlsConnector, String> {
        let config = client_config(ca).map_err(|e| e.to_string())?;
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| format!("{host:?} is not a host name TLS can check"))?;
        Ok(TlsConnector {
            config: Arc::new(config),
            name,
        })
    }
}

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let mut conn = ClientConnection::new(self.config.clone(), self.name.clone())?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport {
            buffers,
            stream: rustls::StreamOwned { conn, sock },
        })))
    }
}

pub(super) struct TlsTransport {
    buffers: LazyBuffers,
    stream: rustls::StreamOwned<ClientConnection, TransportAdapter>,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTransport").finish()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

/// `TLS: the collector's certificate was not accepted (...)` when the handshake failed on the
/// collector's certificate.
pub(super) fn certificate_problem(e: &ureq::Error) -> Option<String> {
    let tls = match e {
        ureq::Error::Rustls(t) => t,
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>()?,
        _ => return None,
    };
    match tls {
        rustls::Error::InvalidCertificate(c) => Some(format!(
            "TLS: the collector's certificate was not accepted ({})",
            cert_words(c)
        )),
        _ => None,
    }
}

/// rustls' reason, in words.
fn cert_words(c: &CertificateError) -> String {
    use CertificateError as C;
    match c {
        C::UnknownIssuer => "signed by an unknown authority: not trusted; see --otlp-ca".into(),
        C::Expired | C::ExpiredContext { .. } => "expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "not valid yet".into(),
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "not valid for this host name".into()
        }
        C::Revoked => "revoked".into(),
        C::BadSignature => "bad signature: not signed by the authority it names".into(),
        C::BadEncoding => "badly encoded".into(),
        C::Other(o) => match o.0.downcast_ref::<Untrusted>() {
            Some(u) => u.to_string(),
            // webpki's own reasons are type names (`CaUsedAsEndEntity`): said as such.
            None => format!("refused by the certificate checks: {}", o.0),
        },
        other => format!("refused by the certificate checks: {other}"),
    }
}

/// The few facts of an X.509 certificate the verifier needs beyond webpki's: its issuer and
/// subject (equal: self-signed) and its validity period. A bounds-checked DER walk: the
/// certificate comes from the collector.
mod der {
    pub struct Facts<'a> {
        pub issuer: &'a [u8],
        pub subject: &'a [u8],
        /// Unix seconds.
        pub not_before: i64,
        pub not_after: i64,
    }

    /// One DER element: (tag, contents, what follows).
    fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, b) = b.split_first()?;
        let (&first, mut b) = b.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || b.len() < n {
                return None;
            }
            let len = b[..n].iter().fold(0usize, |l, &x| l << 8 | usize::from(x));
            b = &b[n..];
            len
        };
        (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
    }

    /// An element that must have tag `want`: (contents, what follows).
    fn expect(b: &[u8], want: u8) -> Option<(&[u8], &[u8])> {
        let (tag, c, rest) = tlv(b)?;
        (tag == want).then_some((c, rest))
    }

    const SEQUENCE: u8 = 0x30;

    pub fn facts(cert: &[u8]) -> Option<Facts<'_>> {
        let (cert, _) = expect(cert, SEQUENCE)?;
        let (tbs, _) = expect(cert, SEQUENCE)?;
        // [0] version, when not v1.
        let mut rest = tbs;
        if let Some((0xa0, _, r)) = tlv(rest) {
            rest = r;
        }
        let (_serial, rest) = expect(rest, 0x02)?;
        let (_signature, rest) = expect(rest, SEQUENCE)?;
        let (issuer, rest) = expect(rest, SEQUENCE)?;
        let (validity, rest) = expect(rest, SEQUENCE)?;
        let (subject, _) = expect(rest, SEQUENCE)?;
        let (t1, nb, v) = tlv(validity)?;
        let (t2, na, _) = tlv(v)?;
        Some(Facts {
            issuer,
            subject,
            not_before: time(t1, nb)?,
            not_after: time(t2, na)?,
        })
    }

    /// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) →
    /// Unix seconds.
    pub(super) fn time(tag: u8, s: &[u8]) -> Option<i64> {
        let s = s.strip_suffix(b"Z")?;
        if !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let num = |b: &[u8]| b.iter().fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
        let (year, rest) = match (tag, s.len()) {
            (0x17, 12) => {
                let yy = num(&s[..2]);
                (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
            }
            (0x18, 14) => (num(&s[..4]), &s[4..]),
            _ => return None,
        };
        let [mo, d, h, mi, se] = [0, 2, 4, 6, 8].map(|i| num(&rest[i..i + 2]));
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
            return None;
        }
        Some(days_from_civil(year, mo, d) * 86400 + h * 3600 + mi * 60 + se)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_files_that_cannot_be_used_are_one_line_errors() {
        let dir = std::env::temp_dir().join(format!("usdt-trace-ca-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = load_ca("--otlp-ca", &missing).unwrap_err();
        assert!(e.to_string().starts_with("--otlp-ca "), "{e}");
        assert!(e.to_string().contains("No such file"), "{e}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "hello\n").unwrap();
        let e = load_ca("OTEL_EXPORTER_OTLP_CERTIFICATE", &empty).unwrap_err();
        assert!(e.why.starts_with("no certificate in it"), "{e}");
        let bad = dir.join("bad.pem");
        std::fs::write(
            &bad,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = load_ca("--otlp-ca", &bad).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two certificates made as `openssl req -x509` makes them (self-signed, CA:TRUE), both
    /// for 127.0.0.1 (P-256, valid 2026-11-28 15:07:02 to 2126-11-04 15:07:02 UTC: a UTCTime
    /// and a GeneralizedTime).
    const SELF_A: &str = "-----BEGIN CERTIFICATE-----\nMIIBkTCCATagAwIBAgIUVASWNaLw300Coql7+ngFXDt4QHcwCgYIKoZIzj0EAwIw\nFDESMBAGA1UEAwwJMTI3LjAuMC4xMCAXDTI2MTEyODE1MDcwMloYDzIxMjYxMTA0\nMTUwNzAyWjAUMRIwEAYDVQQDDAkxMjcuMC4wLjEwWTATBgcqhkjOPQIBBggqhkjO\nPQMBBwNCAATDtVUhYR3pQVJVKVABGx6+SZpn1MfbRdnqoDTSn3mGrXQf3TyQippQ\nxeVQO6v1isc5XE1SUGZDxgR0bhkVwsRNo2QwYjAdBgNVHQ4EFgQUaLnzZNp8I0F/\nnZ1d+waW7vegez0wHwYDVR0jBBgwFoAUaLnzZNp8I0F/nZ1d+waW7vegez0wDwYD\nVR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0kAMEYC\nIQCasPsOkxbfG3b0DjFV7/EquY5Yae1xbf69u53WqbHFOAIhAL3xd1A0LXPSrOkJ\nusoVpqSgXyjO9zOu3hfF/GbYf1mK\n-----END CERTIFICATE-----\n";
    const SELF_B: &str = "-----BEGIN CERTIFICATE-----\nMIIBjzCCATagAwIBAgIURtoDRQrjO4UoflbSWK8RySVyMZowCgYIKoZIzj0EAwIw\nFDESMBAGA1UEAwwJMTI3LjAuMC4xMCAXDTI2MTEyODE1MDcwMloYDzIxMjYxMTA0\nMTUwNzAyWjAUMRIwEAYDVQQDDAkxMjcuMC4wLjEwWTATBgcqhkjOPQIBBggqhkjO\nPQMBBwNCAARztTRcuwkfONCypV3if7tlhOhGla8aYUmFmILdmSTmWy7CXLGXy4VJ\nPefBO88xe5iy35SVWFh5HALRgy+m7IsQo2QwYjAdBgNVHQ4EFgQUJ5vZhUmOKq0+\nRJtEvVFpoPcWXwcwHwYDVR0jBBgwFoAUJ5vZhUmOKq0+RJtEvVFpoPcWXwcwDwYD\nVR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0cAMEQC\nIG+UmqL3ln7ikvFlIdjSj35TS1fC0dW4zf8+WJBUmaDuAiAwuQcBe34lVnxCerxT\n5ZbxVNm7Dsb+mZ410TshHi82kQ==\n-----END CERTIFICATE-----\n";

    fn der(pem: &str) -> Vec<u8> {
        match ureq::tls::parse_pem(pem.as_bytes()).next() {
            Some(Ok(ureq::tls::PemItem::Certificate(c))) => c.der().to_vec(),
            _ => panic!("not a certificate"),
        }
    }

    fn verify(ca: Option<&str>, leaf: &str, name: &str, at: u64) -> Result<(), String> {
        let ca = ca.map(|p| CaCerts(Arc::new(vec![der(p)])));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let v = Verifier::new(ca.as_ref(), provider).unwrap();
        let leaf = der(leaf);
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(
            &CertificateDer::from(leaf.as_slice()),
            &[],
            &name,
            &[],
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(at)),
        )
        .map(|_| ())
        .map_err(|e| match e {
            rustls::Error::InvalidCertificate(c) => cert_words(&c),
            e => e.to_string(),
        })
    }

    #[test]
    fn der_facts_of_a_real_certificate() {
        let d = der(SELF_A);
        let f = der::facts(&d).unwrap();
        assert!(f.issuer == f.subject);
        assert_eq!((f.not_before, f.not_after), (1_795_878_422, 4_949_478_422));
    }

    /// The certificate given is the collector's: trusted in its period and for its name (as
    /// curl --cacert does; webpki alone says CaUsedAsEndEntity). Another self-signed one, even
    /// of the same name, is named as what it is, not "bad signature".
    #[test]
    fn the_given_self_signed_certificate_is_trusted_and_no_other() {
        let now = 1_800_000_000;
        assert_eq!(verify(Some(SELF_A), SELF_A, "127.0.0.1", now), Ok(()));
        assert_eq!(
            verify(Some(SELF_A), SELF_A, "127.0.0.2", now),
            Err("not valid for this host name".into())
        );
        assert_eq!(
            verify(Some(SELF_A), SELF_A, "127.0.0.1", 1_700_000_000),
            Err("not valid yet".into())
        );
        assert_eq!(
            verify(Some(SELF_A), SELF_A, "127.0.0.1", 5_000_000_000),
            Err("expired".into())
        );
        assert_eq!(
            verify(Some(SELF_A), SELF_B, "127.0.0.1", now),
            Err("not trusted: self-signed, and not the certificate given to --otlp-ca".into())
        );
        // A bundle holding it among others.
        let both = format!("{SELF_B}{SELF_A}");
        let ca = load_ca_pem(&both);
        assert_eq!(ca.0.len(), 2);
    }

    /// SELF_A's key: test-only, made with it.
    const SELF_A_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgBMwYsTccO/kyguI+\njwAq3B9Ybq/bLxOAr3iZjxFgojqhRANCAATDtVUhYR3pQVJVKVABGx6+SZpn1Mfb\nRdnqoDTSn3mGrXQf3TyQippQxeVQO6v1isc5XE1SUGZDxgR0bhkVwsRN\n-----END PRIVATE KEY-----\n";

    /// A TLS collector on 127.0.0.1 with SELF_A: each connection's one request answered 200.
    fn collector() -> u16 {
        use rustls::pki_types::pem::PemObject;
        use std::io::BufRead;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(der(SELF_A))],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(SELF_A_KEY.as_bytes()).unwrap(),
            )
            .unwrap();
        let cfg = Arc::new(cfg);
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let cfg = cfg.clone();
                std::thread::spawn(move || {
                    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                    let conn = rustls::ServerConnection::new(cfg).unwrap();
                    let mut r = std::io::BufReader::new(rustls::StreamOwned::new(conn, c));
                    let mut len = 0;
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return; // the client gave up in the handshake
                        }
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; len];
                    let _ = r.read_exact(&mut body);
                    let s = r.get_mut();
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                    let _ = s.flush();
                });
            }
        });
        port
    }

    /// End to end without root: a POST reaches a collector whose self-signed certificate is
    /// the one given, and one whose certificate is not is refused, said in words.
    #[test]
    fn a_post_reaches_the_collector_whose_self_signed_certificate_was_given() {
        use super::super::http::{Client, Endpoint, Posted};
        let port = collector();
        let ep = Endpoint::parse_flag(&format!("https://127.0.0.1:{port}")).unwrap();
        let post = |ca: &str| {
            let ca = CaCerts(Arc::new(vec![der(ca)]));
            let c = Client::new(&ep, Some(&ca), vec![], false).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            c.post("application/x-protobuf", b"spans", deadline, "timed out")
        };
        match post(SELF_A) {
            Posted::Ok => {}
            other => panic!("{other:?}"),
        }
        match post(SELF_B) {
            Posted::Rejected(why) => assert_eq!(
                why,
                "TLS: the collector's certificate was not accepted (not trusted: self-signed, and not the certificate given to --otlp-ca)"
            ),
            other => panic!("{other:?}"),
        }
    }

    fn load_ca_pem(pem: &str) -> CaCerts {
        let p = std::env::temp_dir().join(format!("usdt-trace-ca-both-{}.pem", std::process::id()));
        std::fs::write(&p, pem).unwrap();
        let ca = load_ca("--otlp-ca", &p).unwrap();
        let _ = std::fs::remove_file(&p);
        ca
    }

    #[test]
    fn der_times_are_unix_seconds() {
        assert_eq!(der::time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(der::time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(der::time(0x18, b"20261128143000Z"), Some(1_795_876_200));
        assert_eq!(der::time(0x18, b"2026112814300Z"), None);
        assert_eq!(der::time(0x17, b"7001010000+0Z"), None);
        assert_eq!(der::time(0x17, b"701301000000Z"), None);
    }

    #[test]
    fn truncated_or_garbage_der_is_no_facts() {
        assert!(der::facts(b"").is_none());
        assert!(der::facts(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
        assert!(der::facts(&[0x30, 0x03, 0x30, 0x01, 0x02]).is_none());
    }

    /// A FIFO is refused at once (not waited on), /dev/zero without reading it, a file past
    /// the bound by its size: each a reason in one line.
    #[test]
    fn a_ca_that_is_not_a_small_regular_file_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("usdt-trace-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo reads it only.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let e = load_ca("--otlp-ca", &fifo).unwrap_err();
        assert_eq!(e.why, "not a regular file");
        let e = load_ca("--otlp-ca", Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.to_string(), "--otlp-ca /dev/zero: not a regular file");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let big = dir.join("big.pem");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_CA_FILE + 1).unwrap();
        let e = load_ca("OTEL_EXPORTER_OTLP_CERTIFICATE", &big).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "OTEL_EXPORTER_OTLP_CERTIFICATE {}: larger than 4 MiB: not a PEM file of certificates",
                big.display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
