//! The argv of `LOCK.APPLY` (the effect form of a grant) as arguments of Redis's
//! variadic `RM_Replicate` and `RM_EmitAOF`. Both take the same format language after
//! a different first argument, and a variadic call cannot be assembled at run time, so
//! one macro spells the four shapes once for both: `key token fence`, then
//! `PXAT deadline`, then `SHARED` or `LIMIT n`.

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
