//! Avro's binary encoding written straight from serde and read straight into it, for
//! the shapes Vigil's own value schemas take: records of primitives, enums and
//! two-branch unions with null.
//!
//! apache-avro's schema-directed serde does the same per field through generic schema
//! lookups, a large share of a Kafka member's work per record (docs/decisions.md,
//! 2026-12-03, "Avro without the schema walk"). A shape compiled once from the schema
//! leaves only the bytes to write or read.
//!
//! A schema with anything else (other unions, arrays, maps, fixed, logical types) has
//! no shape, and a value that does not fit one is refused: the caller then goes
//! apache-avro's way, which also names what is wrong.
//!
//! `Shape::of` compiles the schema; `write` walks the shape beside a serde value and
//! appends its bytes; `read` walks it over a datum and hands serde the values.

mod reader;
mod refused;
mod shape;
#[cfg(test)]
mod tests;
mod writer;

pub use reader::read;
pub use refused::Refused;
pub use shape::{Field, Shape};
pub use writer::write;
