//! The address guard of the link check: which addresses a link fetched on a
//! hostile message's behalf may reach, and a resolver that applies it to the
//! addresses the check then connects to (each hop resolves again, so a name
//! that resolves somewhere else the second time, DNS rebinding, is caught).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use mail_auth::hickory_resolver::TokioResolver;

/// The error text of a refused address, as the API shows it.
pub const NOT_ALLOWED: &str = "address not allowed";

/// Which addresses links may reach.
#[derive(Debug, Clone)]
pub struct Guard {
    /// `--link-check-allow-private`: every address may be reached.
    pub allow_private: bool,
    /// The server's own addresses (its listeners', its interfaces').
    pub own: Vec<IpAddr>,
}

impl Guard {
    /// Whether a link may reach `ip`.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allow_private || !(is_internal(ip) || self.own.contains(&ip.to_canonical()))
    }
}

/// Loopback, private, link-local, unique-local, unspecified, shared (CGNAT),
/// broadcast and multicast addresses; IPv4 written inside IPv6 (mapped,
/// compatible, NAT64) is judged as the IPv4 address it carries.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_internal_v4(v4),
            None => {
                let first = v6.segments()[0];
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                    || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                    || (first & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
            }
        },
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0 // "this network" 0.0.0.0/8
        || (a == 100 && (b & 0xc0) == 64) // shared address space 100.64.0.0/10
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
}

/// The IPv4 address an IPv6 address carries: mapped (`::ffff:a.b.c.d`),
/// compatible (`::a.b.c.d`) or NAT64 (`64:ff9b::a.b.c.d`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(low),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(low),
        _ => None,
    }
}

/// Resolves names and keeps only the addresses the guard allows: the link
/// check connects to what this returns, never to another answer.
pub struct GuardedResolver {
    /// Where names are looked up (`--dns`, or the system's resolver configuration).
    pub resolver: Arc<Result<TokioResolver, String>>,
    /// The guard.
    pub guard: Guard,
}

impl GuardedResolver {
    /// The addresses `name` resolves to that the guard allows;
    /// [`NOT_ALLOWED`] when it resolves only to refused ones.
    pub async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        let resolver = self.resolver.as_ref().as_ref().map_err(|e| e.clone())?;
        let found = resolver.lookup_ip(name).await.map_err(|e| e.to_string())?;
        let ips: Vec<IpAddr> = found.iter().collect();
        let allowed: Vec<IpAddr> = ips
            .iter()
            .copied()
            .filter(|ip| self.guard.allows(*ip))
            .collect();
        match (allowed.is_empty(), ips.is_empty()) {
            (false, _) => Ok(allowed),
            (true, false) => Err(NOT_ALLOWED.to_owned()),
            (true, true) => Err(format!("{name} has no address")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_refused_and_public_ones_allowed() {
        let guard = Guard {
            allow_private: false,
            own: vec!["203.0.113.9".parse().unwrap()],
        };
        for refused in [
            "127.0.0.1",
            "127.8.9.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::10.0.0.1",
            "203.0.113.9",
            "::ffff:203.0.113.9",
        ] {
            assert!(!guard.allows(refused.parse().unwrap()), "{refused} allowed");
        }
        for allowed in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "64:ff9b::8.8.8.8",
        ] {
            assert!(guard.allows(allowed.parse().unwrap()), "{allowed} refused");
        }
        let open = Guard {
            allow_private: true,
            own: vec![],
        };
        assert!(open.allows("127.0.0.1".parse().unwrap()));
    }
}
