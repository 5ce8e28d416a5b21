//! The argv of `LOCK.APPLY` (the effect form of a grant) as arguments of Redis's
//! variadic `RM_Replicate` and `RM_EmitAOF`. Both take the same format language after
//! a different first argument, and a variadic call cannot be assembled at run time, so
//! one macro spells the four shapes once for both: `key token fence`, then
//! `PXAT deadline`, then `SHARED` or `LIMIT n`. A holding with a session, a
//! lock-delay or a value (`SESSION s`, `LOCKDELAY ms`, `VALUE v` follow) is spelled as an argv instead
//! (`ApplyForm`): one more allocation per argument, paid only by those.

use fencelock_core::holding::Extras;
use fencelock_core::mode::Mode;

/// The arguments of `LOCK.APPLY` after its key, owned.
pub struct ApplyForm {
    args: Vec<Vec<u8>>,
}

impl ApplyForm {
    pub fn new(
        token: &[u8],
        fence: u64,
        deadline_ms: Option<i64>,
        mode: Mode,
        extras: Extras,
    ) -> Self {
        let mut args = vec![token.to_vec(), fence.to_string().into_bytes()];
        if let Some(deadline) = deadline_ms {
            args.push(b"PXAT".to_vec());
            args.push(deadline.to_string().into_bytes());
            match mode {
                Mode::Exclusive => {}
                Mode::Shared => args.push(b"SHARED".to_vec()),
                Mode::Semaphore(limit) => {
                    args.push(b"LIMIT".to_vec());
                    args.push(limit.to_string().into_bytes());
                }
            }
        }
        if let Some(session) = extras.session {
            args.push(b"SESSION".to_vec());
            args.push(session.to_vec());
        }
        if extras.lock_delay_ms > 0 {
            args.push(b"LOCKDELAY".to_vec());
            args.push(extras.lock_delay_ms.to_string().into_bytes());
        }
        if let Some(value) = extras.value {
            args.push(b"VALUE".to_vec());
            args.push(value.to_vec());
        }
        ApplyForm { args }
    }

    /// The whole argv after the command name: `key`, then the rest.
    pub fn args<'a>(&'a self, key: &'a [u8]) -> Vec<&'a [u8]> {
        std::iter::once(key)
            .chain(self.args.iter().map(Vec::as_slice))
            .collect()
    }
}

/// `$emit($target, "LOCK.APPLY", format, key, token, fence [, PXAT, deadline [, SHARED |
/// LIMIT, n]])`: `$token`, `$fence` and `$deadline` are byte slices (`$deadline` an
/// `Option`), `$mode` a `Mode` (its shared form is only spelled with a deadline).
macro_rules! emit_lock_apply {
    ($emit:expr, $target:expr, $key:expr, $token:expr, $fence:expr, $deadline:expr, $mode:expr) => {{
        use ::fencelock_core::mode::Mode;
        use ::std::ffi::c_char;
        let (token, fence): (&[u8], &[u8]) = ($token, $fence);
        let deadline: Option<&[u8]> = $deadline;
        let (t, tl) = (token.as_ptr().cast::<c_char>(), token.len());
        let (f, fl) = (fence.as_ptr().cast::<c_char>(), fence.len());
        let (command, pxat) = (c"LOCK.APPLY".as_ptr(), c"PXAT".as_ptr());
        match (deadline, $mode) {
            // SAFETY: "sbb" matches key, token, fence.
            (None, _) => unsafe { $emit($target, command, c"sbb".as_ptr(), $key, t, tl, f, fl) },
            (Some(deadline), mode) => {
                let (d, dl) = (deadline.as_ptr().cast::<c_char>(), deadline.len());
                match mode {
                    // SAFETY: "sbbcb" matches key, token, fence, PXAT, deadline.
                    Mode::Exclusive => unsafe {
                        $emit(
                            $target,
                            command,
                            c"sbbcb".as_ptr(),
                            $key,
                            t,
                            tl,
                            f,
                            fl,
                            pxat,
                            d,
                            dl,
                        )
                    },
                    // SAFETY: "sbbcbc" matches key, token, fence, PXAT, deadline, SHARED.
                    Mode::Shared => unsafe {
                        $emit(
                            $target,
                            command,
                            c"sbbcbc".as_ptr(),
                            $key,
                            t,
                            tl,
                            f,
                            fl,
                            pxat,
                            d,
                            dl,
                            c"SHARED".as_ptr(),
                        )
                    },
                    Mode::Semaphore(limit) => {
                        let mut digits = [0u8; ::fencelock_core::digits::DIGITS];
                        let limit = ::fencelock_core::digits::digits(i64::from(limit), &mut digits);
                        let (n, nl) = (limit.as_ptr().cast::<c_char>(), limit.len());
                        // SAFETY: "sbbcbcb" matches key, token, fence, PXAT, deadline,
                        // LIMIT, limit.
                        unsafe {
                            $emit(
                                $target,
                                command,
                                c"sbbcbcb".as_ptr(),
                                $key,
                                t,
                                tl,
                                f,
                                fl,
                                pxat,
                                d,
                                dl,
                                c"LIMIT".as_ptr(),
                                n,
                                nl,
                            )
                        }
                    }
                }
            }
        }
    }};
}
