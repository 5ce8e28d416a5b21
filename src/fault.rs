//! Forced panics for testing the guard at the boundary (cargo feature
//! `panic-injection`, off by default and never in a released module): a command, a
//! timer or a blocked client's reply whose token is `fencelock-panic:<site>` panics
//! there. Without the feature this compiles to nothing.

/// Panics if the feature is on and `token` asks for a panic at `site`.
#[inline(always)]
pub fn inject(site: &str, token: Option<&[u8]>) {
    #[cfg(feature = "panic-injection")]
    if let Some(token) = token {
        if token.strip_prefix(b"fencelock-panic:") == Some(site.as_bytes()) {
            panic!("injected panic at {site}");
        }
    }
    #[cfg(not(feature = "panic-injection"))]
    let _ = (site, token);
}
