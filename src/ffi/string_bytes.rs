//! The bytes of a `RedisModuleString` Redis hands to a callback, borrowed for as long as
//! the caller says the string lives (one helper instead of a copy per callback).

use redis_module::raw;

/// The bytes of `string` (empty for a null string or a null buffer).
///
/// # Safety
/// `string` must be null or a live module string that stays unchanged for `'a`.
pub(super) unsafe fn bytes_of<'a>(string: *const raw::RedisModuleString) -> &'a [u8] {
    if string.is_null() {
        return &[];
    }
    let mut len = 0usize;
    // SAFETY: a live module string, as the caller promises.
    let ptr = unsafe { api!(RedisModule_StringPtrLen)(string, &mut len) };
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis's buffer of `len` bytes, unchanged for `'a` as the caller promises.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}
