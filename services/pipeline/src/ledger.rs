//! The input ledger: every line read is accounted for exactly once.

use std::fmt;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Input lines read (blank lines are not records and are not counted).
    pub read: u64,
    pub orders: u64,
    pub payments: u64,
    pub devices_on_time: u64,
    /// Device events sent to the late side output.
    pub devices_late: u64,
    pub dead_letters: u64,
}

impl Ledger {
    /// Processed on time.
    pub fn on_time(&self) -> u64 {
        self.orders + self.payments + self.devices_on_time
    }

    /// read = processed on time + late + dead letters.
    pub fn balances(&self) -> bool {
        self.read == self.on_time() + self.devices_late + self.dead_letters
    }
}

impl fmt::Display for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "read {} = on time {} (orders {}, payments {}, device events {}) + late {} + dead letters {}: {}",
            self.read,
            self.on_time(),
            self.orders,
            self.payments,
            self.devices_on_time,
            self.devices_late,
            self.dead_letters,
            if self.balances() { "balanced" } else { "DOES NOT BALANCE" }
        )
    }
}
