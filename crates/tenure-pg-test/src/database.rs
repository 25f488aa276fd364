//! A database of a test's own, for tests that must not touch anybody else's connections (a
//! test that terminates backends kills only those of its database).

/// A database created on a server for one test, dropped (with its connections) when dropped.
#[derive(Debug)]
pub struct TempDatabase {
    server_url: String,
    name: String,
}

impl TempDatabase {
    /// Creates a database with a unique name on the server at `server_url`.
    pub async fn create(server_url: &str) -> Result<TempDatabase, String> {
        let name = crate::unique_name("tenure_db");
        let client = crate::connect(server_url)
            .await
            .map_err(|e| format!("connecting to create a database: {e}"))?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| format!("creating database {name}: {e}"))?;
        Ok(TempDatabase {
            server_url: server_url.to_owned(),
            name,
        })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A URL for the same server and user, on this database.
    pub fn url(&self) -> String {
        with_database(&self.server_url, &self.name)
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        let _ = crate::execute_detached(
            &self.server_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// `url` (a `postgres://` URL, query string kept, or a key/value string) pointing at database
/// `name` instead.
pub fn with_database(url: &str, name: &str) -> String {
    if !url.contains("://")
        && let Ok(mut info) = tenure_conninfo::ConnInfo::parse(url)
    {
        info.set("dbname", name);
        return info.to_key_value_string();
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    if query.is_empty() {
        format!("{base}/{name}")
    } else {
        format!("{base}/{name}?{query}")
    }
}

/// `url` (a URL or a key/value string) with `user` as the user and no password, as a
/// key/value string.
pub fn with_user(url: &str, user: &str) -> String {
    match tenure_conninfo::ConnInfo::parse(url) {
        Ok(mut info) => {
            info.remove("password");
            info.set("user", user);
            info.to_key_value_string()
        }
        Err(_) => format!("{url} user={user}"),
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn urls_get_the_new_database() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
    }
}
