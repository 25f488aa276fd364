//! TLS for the tokio-postgres driver, with rustls (the `ring` provider: no OpenSSL, no cmake),
//! with libpq's meaning of `sslmode` and `sslrootcert`:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `allow`, `prefer` (the default) | if the server offers it, else plain text | not checked |
//! | `require` | always: a server without TLS is an error | not checked, unless `sslrootcert` is given (or `~/.postgresql/root.crt` exists): then as `verify-ca` |
//! | `verify-ca` | always | signed by a trusted root; any host name |
//! | `verify-full` | always | signed by a trusted root, for the host connected to |
//!
//! The trusted roots: the PEM file `sslrootcert` names; the system's roots for
//! `sslrootcert=system` or when none is given and `~/.postgresql/root.crt` does not exist
//! (`rustls-native-certs`). `allow` is taken as `prefer` (tokio-postgres cannot try plain text
//! first). Once TLS is asked for, a failed handshake is an error, never a fallback to plain
//! text; every such error says that it is about TLS, and why (certificate not trusted, host
//! name mismatch, server without TLS).
//!
//! sqlx applies the same parameters itself, with the same meaning (`config::sqlx_options`);
//! its TLS failures are put in the same words ([`reason`]).

// The verifiers serve the tokio-postgres driver only.
#![cfg_attr(not(feature = "deadpool"), allow(dead_code, unused_imports))]

#[cfg(feature = "deadpool")]
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
#[cfg(feature = "deadpool")]
use std::pin::Pin;
use std::sync::Arc;
#[cfg(feature = "deadpool")]
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tenure_conninfo::{ConnInfo, SslMode};
#[cfg(feature = "deadpool")]
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
#[cfg(feature = "deadpool")]
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// The tokio-postgres configuration and TLS connector for `info` (`sslmode` and `sslrootcert`
/// with libpq's meaning: `docs/postgres.md`, "Connecting"): the one place that turns a
/// connection string into what tokio-postgres connects with, for the storage's pool and for
/// any other connection (a LISTEN connection, a test's client), so that they all follow the
/// same TLS settings. Unless the string sets them, `application_name` is `tenure` and
/// connecting is bounded by `timeout`.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use tenure_postgres::tenure_conninfo::ConnInfo;
/// let info = ConnInfo::parse("host=db.internal user=app sslmode=verify-full")?;
/// let timeout = std::time::Duration::from_secs(5);
/// let (config, tls) = tenure_postgres::tokio_postgres_config(&info, timeout)?;
/// let (client, connection) = config.connect(tls).await?;
/// tokio::spawn(connection);
/// # drop(client); Ok(()) }
/// ```
#[cfg(feature = "deadpool")]
pub fn tokio_postgres_config(
    info: &ConnInfo,
    timeout: std::time::Duration,
) -> Result<(tokio_postgres::Config, MakeRustls), crate::BuildError> {
    tokio_postgres(info, timeout).map_err(|reason| crate::BuildError::Url {
        url: info.redacted(),
        reason,
    })
}

/// [`tokio_postgres_config`], with the reason of a failure as text.
#[cfg(feature = "deadpool")]
pub(crate) fn tokio_postgres(
    info: &ConnInfo,
    timeout: std::time::Duration,
) -> Result<(tokio_postgres::Config, MakeRustls), String> {
    let mut config = super::config::tokio_config(info, timeout)?;
    let mode = info.ssl_mode().map_err(|e| e.to_string())?;
    config.ssl_mode(match mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Allow | SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    let connector = MakeRustls::new(mode, info.ssl_root_cert())?;
    Ok((config, connector))
}

/// How the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// Not at all (the handshake's signatures still are).
    Nothing,
    /// Its chain, up to a trusted root; not its name.
    Chain,
    /// Its chain and its name.
    Full,
}

/// A tokio-postgres `MakeTlsConnect` over rustls, checking the server as `sslmode` asks; made
/// by [`tokio_postgres_config`].
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl MakeRustls {
    /// The connector for `mode` with the roots of `root_cert` (a PEM file, `system`, or none).
    fn new(mode: SslMode, root_cert: Option<&str>) -> Result<MakeRustls, String> {
        let default_root = default_root_file().filter(|p| p.is_file());
        let check = match mode {
            SslMode::VerifyFull => Check::Full,
            SslMode::VerifyCa => Check::Chain,
            SslMode::Require if root_cert.is_some() || default_root.is_some() => Check::Chain,
            _ => Check::Nothing,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let config = match check {
            Check::Nothing => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked {
                    algorithms: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth(),
            Check::Chain | Check::Full => {
                let roots = Arc::new(roots(root_cert, default_root.as_deref())?);
                let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| format!("TLS: no usable root certificate: {e}"))?;
                if check == Check::Full {
                    builder.with_webpki_verifier(verifier).with_no_client_auth()
                } else {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
                        .with_no_client_auth()
                }
            }
        };
        Ok(MakeRustls {
            config: Arc::new(config),
        })
    }
}

/// libpq's default root file, `~/.postgresql/root.crt`.
fn default_root_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".postgresql").join("root.crt"))
}

/// The trusted roots: those of the PEM file `root_cert`, or the system's.
fn roots(root_cert: Option<&str>, default_root: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let file = match root_cert {
        Some("system") => None,
        Some(path) => Some(Path::new(path)),
        None => default_root,
    };
    match file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    format!(
                        "TLS: cannot read the root certificates of sslrootcert={}: {e}",
                        path.display()
                    )
                })?;
            for cert in certs {
                store.add(cert).map_err(|e| {
                    format!(
                        "TLS: a certificate of {} is not usable: {e}",
                        path.display()
                    )
                })?;
            }
            if store.is_empty() {
                return Err(format!(
                    "TLS: sslrootcert={} holds no certificate",
                    path.display()
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "TLS: no system root certificate found; give sslrootcert=<file>".to_owned(),
                );
            }
        }
    }
    Ok(store)
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The name is checked last, once the chain is known to be good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer`, `require` without roots: encryption without authentication, as libpq does it.
#[derive(Debug)]
struct Unchecked {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Why a TLS handshake failed, in words, if `err` is a TLS failure (rustls's error inside an
/// I/O error, as both drivers report it).
pub(crate) fn reason(err: &io::Error) -> Option<String> {
    let tls = err.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(match tls {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "the server's certificate is not valid for the host name connected to \
              (sslmode=verify-full)"
            .to_owned(),
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => {
            "the server's certificate is not signed by a trusted root (see sslrootcert)".to_owned()
        }
        rustls::Error::InvalidCertificate(other) => {
            format!("the server's certificate is not acceptable: {other:?}")
        }
        other => other.to_string(),
    })
}

/// The TLS failure of a handshake, in words that say it is about TLS and why.
#[cfg(feature = "deadpool")]
fn describe(err: io::Error) -> io::Error {
    let why = reason(&err).unwrap_or_else(|| err.to_string());
    io::Error::new(err.kind(), format!("TLS handshake failed: {why}"))
}

#[cfg(feature = "deadpool")]
impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TLS: {domain:?} is not a valid host name: {e}"),
            )
        })?;
        Ok(RustlsConnect {
            config: self.config.clone(),
            name,
        })
    }
}

#[cfg(feature = "deadpool")]
/// The connector of one connection (its server's name), made by [`MakeRustls`].
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

#[cfg(feature = "deadpool")]
impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream<S>, io::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move {
            connector
                .connect(self.name, stream)
                .await
                .map(RustlsStream)
                .map_err(describe)
        })
    }
}

#[cfg(feature = "deadpool")]
/// A TLS stream, as tokio-postgres reads and writes it, made by [`RustlsConnect`].
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

#[cfg(feature = "deadpool")]
impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

#[cfg(feature = "deadpool")]
impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(feature = "deadpool")]
impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM's channel binding is optional (`channel_binding=prefer`): not offered.
        ChannelBinding::none()
    }
}
