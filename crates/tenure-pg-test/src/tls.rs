//! Certificates for TLS tests, made by the test with the `openssl` command: a certificate
//! authority of its own and a server certificate it signs, for [`Cluster::enable_tls`].
//!
//! [`Cluster::enable_tls`]: crate::cluster::Cluster::enable_tls

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A certificate authority made for one test, with a server certificate for `localhost`
/// (and no other name: a connection to `127.0.0.1` with `verify-full` must fail). Its
/// directory is removed when dropped.
#[derive(Debug)]
pub struct TestCa {
    dir: PathBuf,
}

impl TestCa {
    /// Makes a CA (EC P-256, valid two days) and a server certificate for `localhost` it signs.
    pub fn create() -> Result<TestCa, String> {
        let dir = std::env::temp_dir().join(crate::unique_name("tenure_ca"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let subject = format!("/CN=tenure test CA {}", crate::unique_name("ca"));
        let ca = TestCa { dir };
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        ca.openssl(&[
            &["req", "-x509"],
            &key[..],
            &[
                "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", &subject,
            ],
        ])?;
        ca.openssl(&[
            &["req", "-new"],
            &key[..],
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=localhost",
            ],
        ])?;
        std::fs::write(
            ca.dir.join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .map_err(|e| format!("writing the extensions: {e}"))?;
        ca.openssl(&[&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]])?;
        Ok(ca)
    }

    /// The CA's certificate (PEM), for `sslrootcert`.
    pub fn root_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The server's certificate (PEM).
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    /// The server's private key (PEM).
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    fn openssl(&self, parts: &[&[&str]]) -> Result<(), String> {
        let args: Vec<&str> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        let output = Command::new("openssl")
            .args(&args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running openssl (is it installed?): {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Copies `from` to `to`, readable by its owner only.
pub(crate) fn install_private(from: &Path, to: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::copy(from, to).map_err(|e| format!("copying {}: {e}", from.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("protecting {}: {e}", to.display()))
}
