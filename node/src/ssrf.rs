//! The SSRF guard: which addresses the node's requests to URLs others chose (push webhooks,
//! `web_fetch`) may reach, and a client that connects to exactly those.
//!
//! A URL passes when every address its host resolves to is public, or is allowed by the
//! guard's allowlist (`push.allow`, `web.allow`: host names, addresses or networks). The
//! request then connects to exactly the addresses checked ([`pinned_client`]), so a DNS answer
//! that changes between the check and the connection (rebinding) cannot send it elsewhere.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest::Url;

/// How long resolving a URL's host may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Host names of cloud metadata services, refused whatever they resolve to.
const METADATA_HOSTS: &[&str] = &["metadata.google.internal", "metadata", "instance-data"];

/// Why a URL cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GuardError {
    /// The URL is not an absolute http or https URL.
    #[error("{0}")]
    Invalid(String),
    /// The URL points where the guard's requests may not go.
    #[error("{0}")]
    Refused(String),
    /// Its host does not resolve (now).
    #[error("{0}")]
    Unresolved(String),
}

/// A checked URL and the addresses to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The URL.
    pub(crate) url: Url,
    /// The host name to pin to `addrs`; `None` when the URL names an address.
    pub(crate) host: Option<String>,
    /// The addresses checked.
    pub(crate) addrs: Vec<SocketAddr>,
}

/// Whose requests a guard checks, for the messages that refuse them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Purpose {
    /// What is refused, in the plural: `webhooks`.
    pub(crate) what: &'static str,
    /// The configuration key whose entries let an address through: `push.allow`.
    pub(crate) key: &'static str,
    /// What to do instead of writing credentials in the URL.
    pub(crate) credentials: &'static str,
}

/// Push webhooks.
pub(crate) const WEBHOOKS: Purpose = Purpose {
    what: "webhooks",
    key: "push.allow",
    credentials: "use the config's `authentication` instead",
};

/// The guard, with its allowlist.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    allow: Vec<AllowRule>,
    purpose: Purpose,
}

impl Guard {
    /// A guard for `purpose` that lets through what `allow` names.
    pub(crate) fn new(allow: Vec<AllowRule>, purpose: Purpose) -> Self {
        Self { allow, purpose }
    }

    /// Checks `url`: its form, its host, and every address it resolves to.
    pub(crate) async fn check(&self, url: &str) -> Result<Target, GuardError> {
        let url = parse(url, self.purpose)?;
        let port = url.port_or_known_default().unwrap_or(443);
        let Some(host) = url.host_str() else {
            return Err(GuardError::Invalid(format!("`{url}` has no host")));
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            self.admit(ip, &url)?;
            return Ok(Target {
                addrs: vec![SocketAddr::new(ip, port)],
                url,
                host: None,
            });
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let allowed_by_name = self
            .allow
            .iter()
            .any(|rule| matches!(rule, AllowRule::Host(name) if *name == host));
        if !allowed_by_name && METADATA_HOSTS.contains(&host.as_str()) {
            return Err(GuardError::Refused(format!(
                "`{url}` names a cloud metadata service; {} may not reach it",
                self.purpose.what
            )));
        }
        let lookup = tokio::net::lookup_host((host.as_str(), port));
        let addrs: Vec<SocketAddr> = tokio::time::timeout(LOOKUP_TIMEOUT, lookup)
            .await
            .map_err(|_| {
                GuardError::Unresolved(format!("the host of `{url}` did not resolve in time"))
            })?
            .map_err(|e| {
                GuardError::Unresolved(format!("cannot resolve the host of `{url}`: {e}"))
            })?
            .collect();
        if addrs.is_empty() {
            return Err(GuardError::Unresolved(format!(
                "the host of `{url}` resolves to no address"
            )));
        }
        if !allowed_by_name {
            for addr in &addrs {
                self.admit(addr.ip(), &url)?;
            }
        }
        Ok(Target {
            url,
            host: Some(host),
            addrs,
        })
    }

    /// Refuses `ip` unless it is public or allowed by a network rule.
    fn admit(&self, ip: IpAddr, url: &Url) -> Result<(), GuardError> {
        let Some(what) = forbidden(ip) else {
            return Ok(());
        };
        if self.allow.iter().any(|rule| match rule {
            AllowRule::Network(net, len) => in_network(ip, *net, *len),
            AllowRule::Host(_) => false,
        }) {
            return Ok(());
        }
        Err(GuardError::Refused(format!(
            "`{url}` reaches {ip}, {what}; {} may not go there unless `{}` names the host or \
             the address",
            self.purpose.what, self.purpose.key
        )))
    }
}

/// `url` as an absolute http or https URL without credentials.
pub(crate) fn parse(url: &str, purpose: Purpose) -> Result<Url, GuardError> {
    let parsed = Url::parse(url)
        .map_err(|e| GuardError::Invalid(format!("`{url}` is not an absolute URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(GuardError::Invalid(format!(
            "`{url}` is not an http or https URL"
        )));
    }
    if parsed.host().is_none() {
        return Err(GuardError::Invalid(format!("`{url}` has no host")));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(GuardError::Invalid(format!(
            "`{url}` carries credentials; {}",
            purpose.credentials
        )));
    }
    Ok(parsed)
}

/// One entry of an allowlist (`push.allow`, `web.allow`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllowRule {
    /// An address, or a network: the address and the length of its prefix.
    Network(IpAddr, u8),
    /// A host name, lowercase, without a trailing dot.
    Host(String),
}

impl AllowRule {
    /// Parses `1.2.3.4`, `10.0.0.0/8`, `fd00::/8`, `[::1]` or a host name.
    pub(crate) fn parse(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        let (address, prefix) = match entry.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (entry, None),
        };
        let bare = address.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = match prefix {
                None => max,
                Some(prefix) => prefix
                    .parse::<u8>()
                    .ok()
                    .filter(|len| *len <= max)
                    .ok_or_else(|| {
                        format!("`{entry}`: the prefix length must be a number from 0 to {max}")
                    })?,
            };
            return Ok(Self::Network(ip, len));
        }
        if prefix.is_some() {
            return Err(format!(
                "`{entry}` is not a network: write an address and a prefix length, as in \
                 10.0.0.0/8"
            ));
        }
        let host = entry.trim_end_matches('.').to_ascii_lowercase();
        let valid = !host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if !valid {
            return Err(format!(
                "`{entry}` is neither an address, a network (CIDR) nor a host name"
            ));
        }
        Ok(Self::Host(host))
    }

    /// The entries of `allow` that parse (each was checked when the configuration was
    /// resolved; a bad one is skipped).
    pub(crate) fn parse_all(allow: &[String]) -> Vec<Self> {
        allow
            .iter()
            .filter_map(|entry| Self::parse(entry).ok())
            .collect()
    }
}

/// A client that connects to `target`'s checked addresses only, follows no redirect (each
/// hop is the caller's to check again) and takes at most `timeout` per request.
pub(crate) fn pinned_client(
    target: &Target,
    timeout: Duration,
    tls: &mew_transport::TlsOptions,
) -> reqwest::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .no_proxy();
    if let Some(host) = &target.host {
        builder = builder.resolve_to_addrs(host, &target.addrs);
    }
    tls.configure(builder)?.build()
}

/// What kind of address `ip` is, when the guard refuses it; `None` for a public address.
pub(crate) fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => forbidden_v4(ip),
        IpAddr::V6(ip) => forbidden_v6(ip),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let net = |base: [u8; 4], len: u8| in_network(IpAddr::V4(ip), IpAddr::from(base), len);
    Some(if ip == Ipv4Addr::new(169, 254, 169, 254) {
        "a cloud metadata address"
    } else if a == 0 {
        "an unspecified address"
    } else if a == 127 {
        "a loopback address"
    } else if a == 10 || net([172, 16, 0, 0], 12) || (a == 192 && b == 168) {
        "a private address"
    } else if a == 169 && b == 254 {
        "a link-local address"
    } else if net([100, 64, 0, 0], 10) {
        "a shared (CGNAT) address"
    } else if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113)
    {
        "a documentation address"
    } else if (a, b, c) == (192, 0, 0) || net([198, 18, 0, 0], 15) {
        "a reserved address"
    } else if ip.is_multicast() {
        "a multicast address"
    } else if ip.is_broadcast() {
        "the broadcast address"
    } else if a >= 240 {
        "a reserved address"
    } else {
        return None;
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    // An IPv4 address in IPv6 form is judged as the IPv4 address.
    if let Some(v4) = embedded_v4(ip) {
        return forbidden_v4(v4);
    }
    let segments = ip.segments();
    let net = |base: Ipv6Addr, len: u8| in_network(IpAddr::V6(ip), IpAddr::V6(base), len);
    Some(
        if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
            "a cloud metadata address"
        } else if ip.is_unspecified() {
            "an unspecified address"
        } else if ip.is_loopback() {
            "a loopback address"
        } else if segments[0] & 0xfe00 == 0xfc00 {
            "a private (unique local) address"
        } else if segments[0] & 0xffc0 == 0xfe80 || segments[0] & 0xffc0 == 0xfec0 {
            "a link-local address"
        } else if segments[0] & 0xff00 == 0xff00 {
            "a multicast address"
        } else if net(Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0), 32)
            || net(Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20)
        {
            "a documentation address"
        } else if net(Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64) {
            "a discard address"
        } else {
            return None;
        },
    )
}

/// The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64 or 6to4 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new(
        (s[6] >> 8) as u8,
        (s[6] & 0xff) as u8,
        (s[7] >> 8) as u8,
        (s[7] & 0xff) as u8,
    );
    match s {
        // ::ffff:a.b.c.d
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        // ::a.b.c.d (deprecated), but not :: and ::1
        [0, 0, 0, 0, 0, 0, _, _] if !ip.is_unspecified() && !ip.is_loopback() => Some(low),
        // 64:ff9b::a.b.c.d (NAT64)
        [0x0064, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        // 2002:aabb:ccdd::/48 (6to4)
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            (hi & 0xff) as u8,
            (lo >> 8) as u8,
            (lo & 0xff) as u8,
        )),
        _ => None,
    }
}

/// Whether `ip` is in the network `net/len` (an IPv4-mapped `ip` matches IPv4 networks).
fn in_network(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let len = u32::from(len.min(32));
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let len = u32::from(len.min(128));
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn addresses_are_classified() {
        for (address, expected) in [
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("172.32.0.1", None),
            ("100.128.0.1", None),
            ("2606:4700:4700::1111", None),
            ("0.0.0.0", Some("an unspecified address")),
            ("127.0.0.1", Some("a loopback address")),
            ("127.255.255.254", Some("a loopback address")),
            ("10.1.2.3", Some("a private address")),
            ("172.16.0.1", Some("a private address")),
            ("172.31.255.255", Some("a private address")),
            ("192.168.1.1", Some("a private address")),
            ("169.254.1.1", Some("a link-local address")),
            ("169.254.169.254", Some("a cloud metadata address")),
            ("100.64.0.1", Some("a shared (CGNAT) address")),
            ("100.127.255.255", Some("a shared (CGNAT) address")),
            ("192.0.2.1", Some("a documentation address")),
            ("198.51.100.7", Some("a documentation address")),
            ("203.0.113.9", Some("a documentation address")),
            ("224.0.0.1", Some("a multicast address")),
            ("255.255.255.255", Some("the broadcast address")),
            ("240.0.0.1", Some("a reserved address")),
            ("::", Some("an unspecified address")),
            ("::1", Some("a loopback address")),
            ("fc00::1", Some("a private (unique local) address")),
            ("fd12:3456::1", Some("a private (unique local) address")),
            ("fd00:ec2::254", Some("a cloud metadata address")),
            ("fe80::1", Some("a link-local address")),
            ("ff02::1", Some("a multicast address")),
            ("2001:db8::1", Some("a documentation address")),
            // IPv4 in IPv6 clothing is judged as IPv4.
            ("::ffff:127.0.0.1", Some("a loopback address")),
            ("::ffff:10.0.0.1", Some("a private address")),
            ("::ffff:169.254.169.254", Some("a cloud metadata address")),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some("a loopback address")),
            ("64:ff9b::192.168.0.1", Some("a private address")),
            ("64:ff9b::8.8.8.8", None),
            ("2002:7f00:1::1", Some("a loopback address")),
            ("2002:0808:0808::1", None),
        ] {
            assert_eq!(forbidden(ip(address)), expected, "{address}");
        }
    }

    #[test]
    fn networks_match_by_prefix() {
        assert!(in_network(ip("10.9.8.7"), ip("10.0.0.0"), 8));
        assert!(!in_network(ip("11.0.0.1"), ip("10.0.0.0"), 8));
        assert!(in_network(ip("::ffff:10.9.8.7"), ip("10.0.0.0"), 8));
        assert!(in_network(ip("1.2.3.4"), ip("0.0.0.0"), 0));
        assert!(in_network(ip("fd00::5"), ip("fd00::"), 8));
        assert!(!in_network(ip("fe00::5"), ip("fd00::"), 8));
        assert!(!in_network(ip("10.0.0.1"), ip("fd00::"), 8));
        assert!(in_network(ip("127.0.0.1"), ip("127.0.0.1"), 32));
        assert!(!in_network(ip("127.0.0.2"), ip("127.0.0.1"), 32));
    }

    #[test]
    fn allow_entries_parse_as_networks_or_hosts() {
        let net = |ip: &str, len| AllowRule::Network(ip.parse().unwrap(), len);
        for (entry, expected) in [
            ("127.0.0.1", net("127.0.0.1", 32)),
            ("10.0.0.0/8", net("10.0.0.0", 8)),
            ("fd00::/8", net("fd00::", 8)),
            ("[::1]", net("::1", 128)),
            (
                "Hooks.Internal.Example.",
                AllowRule::Host("hooks.internal.example".into()),
            ),
            ("localhost", AllowRule::Host("localhost".into())),
        ] {
            assert_eq!(AllowRule::parse(entry).unwrap(), expected, "{entry}");
        }
        for bad in ["10.0.0.0/33", "::/129", "host/8", "", "a..b", "http://x"] {
            assert!(AllowRule::parse(bad).is_err(), "{bad}");
        }
    }

    fn rules(entries: &[&str]) -> Guard {
        Guard::new(
            entries
                .iter()
                .map(|e| AllowRule::parse(e).unwrap())
                .collect(),
            WEBHOOKS,
        )
    }

    fn refused(result: Result<Target, GuardError>) -> bool {
        matches!(result, Err(GuardError::Refused(_)))
    }

    #[tokio::test]
    async fn urls_are_checked_against_the_allowlist() {
        let strict = rules(&[]);
        assert!(refused(strict.check("http://127.0.0.1:9/hook").await));
        assert!(refused(strict.check("http://[::1]/hook").await));
        assert!(refused(strict.check("http://[::ffff:7f00:1]/hook").await));
        assert!(refused(strict.check("http://localhost:9/hook").await));
        assert!(refused(strict.check("http://169.254.169.254/latest").await));
        assert!(refused(
            strict
                .check("http://metadata.google.internal/computeMetadata")
                .await
        ));
        // A public address literal needs no lookup.
        let target = strict.check("https://8.8.8.8/hook").await.unwrap();
        assert_eq!(target.addrs, [SocketAddr::new(ip("8.8.8.8"), 443)]);
        assert_eq!(target.host, None);

        let loopback = rules(&["127.0.0.1"]);
        let target = loopback.check("http://127.0.0.1:9/hook").await.unwrap();
        assert_eq!(target.addrs, [SocketAddr::new(ip("127.0.0.1"), 9)]);
        assert!(refused(loopback.check("http://127.0.0.2:9/hook").await));
        assert!(refused(loopback.check("http://10.0.0.1/hook").await));

        let network = rules(&["10.0.0.0/8", "fd00::/8"]);
        assert!(network.check("http://10.20.30.40/h").await.is_ok());
        assert!(network.check("http://[fd00::1]/h").await.is_ok());
        assert!(refused(network.check("http://192.168.0.1/h").await));

        // A host allowed by name may resolve anywhere.
        let named = rules(&["localhost"]);
        let target = named.check("http://LOCALHOST:8080/h").await.unwrap();
        assert_eq!(target.host.as_deref(), Some("localhost"));
        assert!(target.addrs.iter().all(|a| a.ip().is_loopback()));
    }

    #[tokio::test]
    async fn malformed_urls_are_invalid() {
        let guard = rules(&["127.0.0.1"]);
        for bad in [
            "not a url",
            "/relative/path",
            "ftp://127.0.0.1/x",
            "file:///srv/hook",
            "http://user:secret@127.0.0.1/x",
        ] {
            assert!(
                matches!(guard.check(bad).await, Err(GuardError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
