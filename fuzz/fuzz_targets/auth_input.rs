//! What an unauthenticated peer controls on the way to authentication: a gRPC request message
//! read for its field 1 (in two pieces), a client certificate's subject, SASL PLAIN and SCRAM
//! messages. None may panic or allocate beyond its caps, whatever the bytes.
#![no_main]

use std::sync::OnceLock;

use security::scram::{Credential, Mechanism, ScramServer};

fn credential() -> &'static Credential {
    static C: OnceLock<Credential> = OnceLock::new();
    C.get_or_init(|| {
        Credential::new(Mechanism::ScramSha256, "pw", security::scram::MIN_ITERATIONS)
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    match which % 4 {
        0 => {
            let cut = rest.first().map_or(0, |b| usize::from(*b)).min(rest.len());
            let mut s = security::fields::FieldScanner::new(1, 1024);
            if s.feed(&rest[..cut]).is_ok() && s.feed(&rest[cut..]).is_ok() {
                let _ = s.finish();
            }
        }
        1 => {
            let _ = security::principal::common_name(rest);
        }
        2 => {
            let _ = security::scram::parse_plain(rest);
        }
        _ => {
            // The client's first and final messages, split where a NUL falls.
            let (first, last) = match rest.iter().position(|b| *b == 0) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &[][..]),
            };
            let mut server = ScramServer::new(Mechanism::ScramSha256);
            if server.first(first, |_| Some(credential().clone())).is_ok() {
                let _ = server.last(last);
            }
        }
    }
});
