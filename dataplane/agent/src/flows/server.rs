// SPDX-License-Identifier: Apache-2.0
//! Serves Hubble's gRPC services over HTTP/2 with a bound on what a client
//! that stops reading may cost: hyper's send buffer per stream is set here
//! (tonic's own server leaves it at hyper's 400 KiB), and mutual TLS is
//! rustls with the unit's credentials.

use std::{sync::Arc, time::Duration};

use anyhow::{Context, Result};
use futures::{Stream, StreamExt};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    service::TowerToHyperService,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{
    rustls::{
        self,
        pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    },
    TlsAcceptor,
};
use tonic::service::Routes;

/// What hyper may hold for one stream its client does not read, beyond the
/// flows waiting for it in the agent (observer::CLIENT_BACKLOG): with them,
/// the bound on what a stalled client costs.
pub const SEND_BUFFER_BYTES: usize = 64 * 1024;

/// How long a client has for its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Mutual TLS: `cert` and `key` (PEM) are this node's, `client_ca` (PEM)
/// signs the client certificates taken; gRPC's ALPN, h2.
pub fn tls_acceptor(cert: &[u8], key: &[u8], client_ca: &[u8]) -> Result<TlsAcceptor> {
    let certs: Vec<CertificateDer> =
        CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>().context("the certificate is no PEM")?;
    anyhow::ensure!(!certs.is_empty(), "the certificate holds no certificate");
    let key = PrivateKeyDer::from_pem_slice(key).context("the key is no PEM private key")?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(client_ca) {
        roots.add(ca.context("the client CA is no PEM")?).context("the client CA is no CA certificate")?;
    }
    anyhow::ensure!(!roots.is_empty(), "the client CA holds no certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .context("the client CA")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("the certificate and its key")?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `routes` to every connection of `incoming` (with `tls`, after its
/// handshake) until aborted.
pub async fn run<IO>(routes: Routes, incoming: impl Stream<Item = std::io::Result<IO>>, tls: Option<TlsAcceptor>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2.max_send_buf_size(SEND_BUFFER_BYTES);
    let routes = routes.prepare();
    let mut incoming = std::pin::pin!(incoming);
    while let Some(accepted) = incoming.next().await {
        let io = match accepted {
            Ok(io) => io,
            Err(e) => {
                // Out of descriptors, say: the next accept may fail alike.
                log::warn!("Hubble's API: accepting a client: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (http2, service, tls) = (http2.clone(), TowerToHyperService::new(routes.clone()), tls.clone());
        tokio::spawn(async move {
            let served = match tls {
                None => http2.serve_connection(TokioIo::new(io), service).await,
                Some(tls) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(io)).await {
                    Ok(Ok(io)) => http2.serve_connection(TokioIo::new(io), service).await,
                    Ok(Err(e)) => return log::debug!("Hubble's API: a client's TLS handshake failed: {e}"),
                    Err(_) => return log::debug!("Hubble's API: a client's TLS handshake timed out"),
                },
            };
            if let Err(e) = served {
                log::debug!("Hubble's API: a client's connection: {e}");
            }
        });
    }
}
