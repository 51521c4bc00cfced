//! The `f64` roundings the input checks need, which `core` does not have without std. Exact for
//! every `f64`: from 2^52 up every finite `f64` is already whole, and below it the whole part
//! survives a round trip through `i64`. (The sign of a zero may differ from std's; no caller
//! can tell `-0.0` from `0.0`.)

/// 2^52: every `f64` at least this large in magnitude is whole.
const ALL_WHOLE: f64 = 4_503_599_627_370_496.0;

/// The whole part of `x`, rounded toward zero.
pub(crate) fn trunc(x: f64) -> f64 {
    if x.abs() < ALL_WHOLE {
        (x as i64) as f64
    } else {
        // Whole already, infinite or NaN.
        x
    }
}

/// The smallest whole number not below `x`.
pub(crate) fn ceil(x: f64) -> f64 {
    let t = trunc(x);
    if t < x {
        t + 1.0
    } else {
        t
    }
}

/// `x` less its whole part: zero exactly when `x` is whole (NaN when `x` is not finite).
pub(crate) fn fract(x: f64) -> f64 {
    x - trunc(x)
}

/// The nearest whole number, halves rounded away from zero.
pub(crate) fn round(x: f64) -> f64 {
    let t = trunc(x);
    let rest = x - t;
    if rest >= 0.5 {
        t + 1.0
    } else if rest <= -0.5 {
        t - 1.0
    } else {
        t
    }
}

#[cfg(test)]
mod tests {

    fn same(a: f64, b: f64) -> bool {
        a == b || (a.is_nan() && b.is_nan())
    }

    fn check(x: f64) {
        assert!(same(super::trunc(x), x.trunc()), "trunc {x}");
        assert!(same(super::ceil(x), x.ceil()), "ceil {x}");
        assert!(same(super::fract(x), x.fract()), "fract {x}");
        assert!(same(super::round(x), x.round()), "round {x}");
    }

    #[test]
    fn edges_match_std() {
        let edges = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            0.49999999999999994,
            -0.49999999999999994,
            4_503_599_627_370_495.5,
            -4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            9_007_199_254_740_993.0,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        for x in edges {
            check(x);
            check(x + 1e-9);
        }
    }

    // proptest is a native-only dev-dependency.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn any_f64_matches_std(bits in proptest::prelude::any::<u64>()) {
            check(f64::from_bits(bits));
        }

        #[test]
        fn small_and_halves_match_std(n in -1_000_000i64..1_000_000, frac in 0u32..8) {
            check(n as f64 + f64::from(frac) / 8.0);
        }
    }
}
