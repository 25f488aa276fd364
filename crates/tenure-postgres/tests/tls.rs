//! TLS on both drivers, against a throwaway cluster and a certificate authority made by the
//! test (issue 14): `require` fails on a server without TLS and `disable` works there; once
//! the server has TLS, `verify-full` with the CA connects (over TLS, as the server reports),
//! a wrong CA and a wrong host name fail with TLS errors, `verify-ca` accepts any host name;
//! the test helpers' own connections follow the same settings, and so does the listener of the
//! wake-ups (issue 15), whose notifications arrive over TLS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tenure_pg_test::cluster::Cluster;
use tenure_pg_test::tls::TestCa;
use tenure_ports::{EventStorage, LeaseChange, LeaseChangeKind, LeaseName, LeaseRequest};
use tenure_postgres::{BuildError, PostgresDriver, PostgresEventStorage, SchemaMode};

/// The error and all its sources, in one line.
fn chain(err: &BuildError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

async fn build(driver: PostgresDriver, url: &str) -> Result<PostgresEventStorage, BuildError> {
    PostgresEventStorage::builder()
        .driver(driver)
        .url(url)
        .prefix("tls_")
        .schema_mode(SchemaMode::Ensure)
        .call_timeout(Duration::from_secs(5))
        .build()
        .await
}

async fn connects(driver: PostgresDriver, url: &str) {
    match build(driver, url).await {
        Ok(storage) => {
            storage.get_leases().await.unwrap();
            storage.close().await.unwrap();
        }
        Err(err) => panic!("{driver}: {url}: {}", chain(&err)),
    }
}

async fn fails_with(driver: PostgresDriver, url: &str, words: &[&str]) -> String {
    let err = match build(driver, url).await {
        Ok(_) => panic!("{driver}: {url} connected"),
        Err(err) => chain(&err),
    };
    let lower = err.to_lowercase();
    assert!(
        lower.contains("tls"),
        "{driver}: {url}: not about TLS: {err}"
    );
    for word in words {
        assert!(
            lower.contains(word),
            "{driver}: {url}: no {word:?} in: {err}"
        );
    }
    err
}

/// Whether the server reports TLS on every connection of `application_name = tenure`.
async fn server_saw_tls(port: u16) -> bool {
    server_saw_tls_on(port, "tenure").await
}

/// Whether the server reports TLS on every connection of `application_name` (and has one).
async fn server_saw_tls_on(port: u16, application_name: &str) -> bool {
    let admin = tenure_pg_test::connect(&format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
    ))
    .await
    .unwrap();
    admin
        .query_one(
            "SELECT coalesce(bool_and(s.ssl), false) FROM pg_stat_ssl s \
             JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
            &[&application_name],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmodes_mean_what_they_mean_in_libpq_on_both_drivers() {
    let (cluster, ca, other_ca) = tokio::task::spawn_blocking(|| {
        let ca = TestCa::create()?;
        let other_ca = TestCa::create()?;
        let cluster = Cluster::create()?;
        cluster.start().map(|()| (cluster, ca, other_ca))
    })
    .await
    .unwrap()
    .expect("a throwaway cluster and a CA (PostgreSQL's binaries and the openssl command)");
    let port = cluster.port();
    let at =
        |host: &str, query: &str| format!("postgres://postgres@{host}:{port}/postgres?{query}");
    let drivers = [PostgresDriver::Deadpool, PostgresDriver::Sqlx09];

    // A server without TLS.
    for driver in drivers {
        fails_with(driver, &at("localhost", "sslmode=require"), &[]).await;
        connects(driver, &at("localhost", "sslmode=disable")).await;
    }

    cluster.enable_tls(&ca).unwrap();
    cluster.reload().unwrap();
    let root = ca.root_cert().display().to_string();
    let full = at(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    );
    // The reload takes effect within moments.
    let deadline = Instant::now() + Duration::from_secs(10);
    while build(PostgresDriver::Deadpool, &full).await.is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The test helpers connect as the storage does (tenure_postgres::tokio_postgres_config).
    let helper = tenure_pg_test::connect(&full).await.unwrap();
    let ssl: bool = helper
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the helper's connection is not over TLS");
    let wrong_ca = other_ca.root_cert().display().to_string();
    let refused = tenure_pg_test::connect(&at(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={wrong_ca}"),
    ))
    .await
    .map(drop)
    .unwrap_err()
    .to_string();
    assert!(refused.contains("TLS"), "{refused}");

    for driver in drivers {
        let storage = build(driver, &full)
            .await
            .unwrap_or_else(|e| panic!("{driver}: {}", chain(&e)));
        assert!(
            server_saw_tls(port).await,
            "{driver}: the server saw no TLS"
        );
        // The listener connects as the storage does, and its notifications arrive.
        assert!(
            server_saw_tls_on(port, "tenure-listener").await,
            "{driver}: the listener is not over TLS"
        );
        let mut changes = storage.lease_changes().unwrap();
        let lease = format!("tls-{driver}");
        storage
            .request_lease(&LeaseRequest::new(
                lease.as_str(),
                "a",
                0,
                Duration::from_secs(300),
            ))
            .await
            .unwrap();
        // A lease's first tenure is not announced (migration 0010); its release is.
        storage.release_lease(lease.as_str(), "a").await.unwrap();
        let heard = tokio::time::timeout(Duration::from_secs(10), changes.next()).await;
        assert_eq!(
            heard,
            Ok(Some(LeaseChange::Changed {
                lease_name: LeaseName::new(lease.as_str()).unwrap(),
                kind: LeaseChangeKind::Released,
            })),
            "{driver}: no notification over TLS"
        );
        storage.close().await.unwrap();
        // Key/value strings too.
        connects(
            driver,
            &format!(
                "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full \
                 sslrootcert='{root}'"
            ),
        )
        .await;

        let wrong_ca = other_ca.root_cert().display().to_string();
        fails_with(
            driver,
            &at(
                "localhost",
                &format!("sslmode=verify-full&sslrootcert={wrong_ca}"),
            ),
            &[],
        )
        .await;
        fails_with(
            driver,
            &at(
                "localhost",
                &format!("sslmode=verify-ca&sslrootcert={wrong_ca}"),
            ),
            &[],
        )
        .await;
        // The certificate names localhost only.
        fails_with(
            driver,
            &at(
                "127.0.0.1",
                &format!("sslmode=verify-full&sslrootcert={root}"),
            ),
            &[],
        )
        .await;
        connects(
            driver,
            &at(
                "127.0.0.1",
                &format!("sslmode=verify-ca&sslrootcert={root}"),
            ),
        )
        .await;
        // require and prefer encrypt without checking the certificate, as libpq does.
        connects(driver, &at("127.0.0.1", "sslmode=require")).await;
        connects(driver, &at("127.0.0.1", "sslmode=prefer")).await;
    }

    // The messages of the tokio-postgres driver say why.
    let wrong_ca = other_ca.root_cert().display().to_string();
    fails_with(
        PostgresDriver::Deadpool,
        &at(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={wrong_ca}"),
        ),
        &["not signed by a trusted root"],
    )
    .await;
    fails_with(
        PostgresDriver::Deadpool,
        &at(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={root}"),
        ),
        &["host name"],
    )
    .await;
}
