//! A schema compiled to the little the binary encoding needs: which primitive, which
//! enum symbols, which record fields in order, which union branch is null.

use apache_avro::Schema;

/// A schema, as far as the binary encoding needs it.
#[derive(Debug, PartialEq)]
pub enum Shape {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Enum(Vec<String>),
    Record(Vec<Field>),
    /// A union of null and one other branch; `null_index` is null's place in it.
    Nullable {
        present: Box<Shape>,
        null_index: u8,
    },
}

#[derive(Debug, PartialEq)]
pub struct Field {
    pub(super) name: String,
    pub(super) shape: Shape,
}

impl Shape {
    /// The shape of `schema`, if it is one this module reads and writes.
    pub fn of(schema: &Schema) -> Option<Shape> {
        Some(match schema {
            Schema::Null => Shape::Null,
            Schema::Boolean => Shape::Boolean,
            Schema::Int => Shape::Int,
            Schema::Long => Shape::Long,
            Schema::Float => Shape::Float,
            Schema::Double => Shape::Double,
            Schema::Bytes => Shape::Bytes,
            Schema::String => Shape::String,
            Schema::Enum(e) => Shape::Enum(e.symbols.clone()),
            Schema::Record(r) => Shape::Record(
                r.fields
                    .iter()
                    .map(|f| Some(Field { name: f.name.clone(), shape: Shape::of(&f.schema)? }))
                    .collect::<Option<_>>()?,
            ),
            Schema::Union(u) => match u.variants() {
                [Schema::Null, other] => Shape::Nullable { present: Box::new(Shape::of(other)?), null_index: 0 },
                [other, Schema::Null] => Shape::Nullable { present: Box::new(Shape::of(other)?), null_index: 1 },
                _ => return None,
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use apache_avro::Schema;
    use vigil_model::topology::{
        DEVICE_EVENTS, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, ENRICHED_PAYMENTS, ORDERS, PAYMENTS,
    };
    use vigil_operators::SeedPipeline;
    use vigil_stream::Pipeline;

    use super::Shape;
    use crate::avro_direct::tests::{schema, shape};

    #[test]
    fn the_per_event_topics_have_shapes_and_unions_of_records_do_not() {
        for topic in SeedPipeline::default().topology().topics() {
            let top_level_union = matches!(schema(topic), Schema::Union(_));
            assert_eq!(Shape::of(&schema(topic)).is_none(), top_level_union, "{}", topic.name);
        }
        for topic in
            [&ORDERS, &PAYMENTS, &DEVICE_EVENTS, &DEVICE_EVENTS_ONTIME, &DEVICE_EVENTS_LATE, &ENRICHED_PAYMENTS]
        {
            shape(topic);
        }
    }
}
