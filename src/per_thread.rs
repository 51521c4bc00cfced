//! `per_thread!`: state kept once per thread. With std it is `std::thread_local!`. Without std
//! the crate builds only for wasm32 without threads, where the one thread is the whole program,
//! so the state is a plain `static`, initialised on first use, behind the same `with` method.

/// Declares statics read through `NAME.with(|value| …)`, as `std::thread_local!` does.
macro_rules! per_thread {
    () => {};
    ($(#[$meta:meta])* static $name:ident: $ty:ty = const $init:block; $($rest:tt)*) => {
        #[cfg(feature = "std")]
        std::thread_local!($(#[$meta])* static $name: $ty = const $init);
        #[cfg(not(feature = "std"))]
        $(#[$meta])*
        static $name: $crate::per_thread::Const<$ty> = $crate::per_thread::Const::new($init);
        per_thread!($($rest)*);
    };
    ($(#[$meta:meta])* static $name:ident: $ty:ty = $init:expr; $($rest:tt)*) => {
        #[cfg(feature = "std")]
        std::thread_local!($(#[$meta])* static $name: $ty = $init);
        #[cfg(not(feature = "std"))]
        $(#[$meta])*
        static $name: $crate::per_thread::Static<$ty> = $crate::per_thread::Static::new(|| $init);
        per_thread!($($rest)*);
    };
}

#[cfg(not(feature = "std"))]
pub(crate) use single::{Const, Static};

/// What `per_thread!` declares for a value made on first use, for naming one in a signature
/// (std's `LocalKey`, or the `static` without std).
#[cfg(all(feature = "workerd", feature = "std", target_arch = "wasm32"))]
pub(crate) type PerThread<T> = std::thread::LocalKey<T>;
#[cfg(all(feature = "workerd", not(feature = "std")))]
pub(crate) type PerThread<T> = Static<T>;

#[cfg(not(feature = "std"))]
#[allow(unsafe_code)]
mod single {
    use core::cell::OnceCell;

    #[cfg(not(all(target_arch = "wasm32", not(target_feature = "atomics"))))]
    compile_error!("keel-lock without the `std` feature builds only for wasm32 without threads");

    /// A value made at compile time (a `const` initialiser).
    pub(crate) struct Const<T>(T);

    // SAFETY: as for `Static` below.
    unsafe impl<T> Sync for Const<T> {}

    impl<T> Const<T> {
        pub(crate) const fn new(value: T) -> Self {
            Const(value)
        }

        /// Runs `f` on the value.
        pub(crate) fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
            f(&self.0)
        }
    }

    /// A value made on first use and kept for the program's life.
    pub(crate) struct Static<T> {
        value: OnceCell<T>,
        init: fn() -> T,
    }

    // SAFETY: only compiled for wasm32 without the `atomics` target feature (checked above):
    // such a module cannot share its memory with another thread, so no `Static` or `Const` is
    // ever reached from two threads.
    unsafe impl<T> Sync for Static<T> {}

    impl<T> Static<T> {
        pub(crate) const fn new(init: fn() -> T) -> Self {
            Static {
                value: OnceCell::new(),
                init,
            }
        }

        /// Runs `f` on the value, making it first if this is its first use.
        pub(crate) fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
            f(self.value.get_or_init(self.init))
        }
    }
}
