//! Sums of money are kept in whole cents, so a window's total does not depend on the
//! order its payments arrived in (float addition is not associative).

pub fn to_cents(amount: f64) -> i64 {
    (amount * 100.0).round() as i64
}

pub fn from_cents(cents: i64) -> f64 {
    cents as f64 / 100.0
}
