//! The error both directions share: a value or datum this module leaves to
//! apache-avro, with a short reason.

use std::fmt::{self, Display};

use serde::{de, ser};

use super::shape::Shape;

/// Why a value was not written or read here (the generic way then says it better).
#[derive(Debug)]
pub struct Refused(pub(super) String);

impl Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl ser::Error for Refused {
    fn custom<T: Display>(msg: T) -> Self {
        Refused(msg.to_string())
    }
}

impl de::Error for Refused {
    fn custom<T: Display>(msg: T) -> Self {
        Refused(msg.to_string())
    }
}

pub(super) fn refuse<T>(shape: &Shape, what: &str) -> Result<T, Refused> {
    Err(Refused(format!("{what} does not fit {shape:?}")))
}
