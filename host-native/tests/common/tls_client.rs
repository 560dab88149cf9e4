//! The rustls client the TLS tests and the TLS bench use: it trusts only the
//! certificate the server wrote (`--tls-cert-out`). Included by path
//! (`#[path = ...] mod tls_client;`) from `tests/tls.rs` and `benches/tls.rs`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A rustls client (ring provider) trusting only the server's written certificate.
pub fn client_config(cert: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cert).expect("PEM") {
        roots.add(c.expect("a certificate")).expect("a CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}
