//! `tls_server_config` → a rustls server config (ring, as `--otlp`'s client): the certificate
//! chain and key from PEM files, read through the config file's checks; client certificates
//! verified against `client_ca_file` when asked.

use super::{TlsSettings, TlsVersion};
use crate::util::trusted::FileError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

/// `client_auth_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `NoClientCert` (the default).
    None,
    /// `VerifyClientCertIfGiven`: a certificate is verified if the client sends one; a
    /// client without one gets in too.
    IfGiven,
    /// `RequireAndVerifyClientCert`: no verified certificate, no connection.
    Required,
}

pub(super) enum TlsError {
    File(FileError),
    Bad(String),
}

/// The server side of TLS, ready for each connection.
pub struct Tls {
    pub config: Arc<rustls::ServerConfig>,
    pub client_auth: ClientAuth,
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = crate::util::trusted::read_bytes(path).map_err(TlsError::File)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Bad(format!("{}: not PEM certificates: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError::Bad(format!(
            "{}: no certificate in it (PEM, -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

impl Tls {
    pub(super) fn load(s: &TlsSettings) -> Result<Tls, TlsError> {
        let chain = certs(&s.cert_file)?;
        let pem = crate::util::trusted::read_bytes(&s.key_file).map_err(TlsError::File)?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
            TlsError::Bad(format!(
                "{}: no private key in it (PEM: PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY): {e}",
                s.key_file.display()
            ))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
            (TlsVersion::Tls12, &rustls::version::TLS12),
            (TlsVersion::Tls13, &rustls::version::TLS13),
        ]
        .into_iter()
        .filter(|(v, _)| (s.min_version..=s.max_version).contains(v))
        .map(|(_, p)| p)
        .collect();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| TlsError::Bad(format!("tls_server_config: {e}")))?;
        let builder = match (&s.client_ca_file, s.client_auth) {
            (Some(ca), ClientAuth::IfGiven | ClientAuth::Required) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in certs(ca)? {
                    roots.add(c).map_err(|e| {
                        TlsError::Bad(format!(
                            "{}: a certificate rustls cannot use as a CA: {e}",
                            ca.display()
                        ))
                    })?;
                }
                let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                );
                let v = if s.client_auth == ClientAuth::IfGiven {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                let v = v
                    .build()
                    .map_err(|e| TlsError::Bad(format!("client_ca_file {}: {e}", ca.display())))?;
                builder.with_client_cert_verifier(v)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            let why = match e {
                rustls::Error::InconsistentKeys(_) => {
                    "the key does not match the certificate".to_string()
                }
                e => e.to_string(),
            };
            TlsError::Bad(format!(
                "{} and {}: {why}",
                s.cert_file.display(),
                s.key_file.display()
            ))
        })?;
        // One request per connection, HTTP/1.1: said in ALPN for clients that ask.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            config: Arc::new(config),
            client_auth: s.client_auth,
        })
    }

    pub fn required_client_cert(&self) -> bool {
        self.client_auth == ClientAuth::Required
    }
}
