//! Databases on the test PostgreSQL server: `MEW_TEST_POSTGRES_URL` names it (`scripts/test`
//! starts a throwaway one), and each test gets a new, empty database of its own.

use anyhow::Context as _;

/// The URL of the test server, whose user may create databases.
pub fn server() -> anyhow::Result<String> {
    std::env::var("MEW_TEST_POSTGRES_URL").context(
        "MEW_TEST_POSTGRES_URL is not set: run the suite with scripts/test, which starts a \
         throwaway PostgreSQL, or point it at a server whose user may create databases",
    )
}

/// A new, empty database on the test server: its URL.
pub async fn database() -> anyhow::Result<String> {
    let server = server()?;
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("cannot reach the test PostgreSQL at {server}"))?;
    tokio::spawn(connection);
    let name = format!("t_{}", uuid::Uuid::now_v7().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .with_context(|| format!("cannot create the database {name}"))?;
    let (base, _) = server
        .rsplit_once('/')
        .context("MEW_TEST_POSTGRES_URL names no database")?;
    Ok(format!("{base}/{name}"))
}

/// Runs `sql` on the test server as its user (outside any test's database).
pub async fn execute(sql: &str) -> anyhow::Result<()> {
    let server = server()?;
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("cannot reach the test PostgreSQL at {server}"))?;
    tokio::spawn(connection);
    client
        .batch_execute(sql)
        .await
        .with_context(|| format!("the test server refused: {sql}"))
}

/// The name of the database of `url` (a URL [`database`] made).
pub fn name_of(url: &str) -> &str {
    url.rsplit_once('/').map_or(url, |(_, name)| name)
}
