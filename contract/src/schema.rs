//! The OpenAPI schema of a `#[serde(flatten)]` `Option<T>` field, which
//! utoipa cannot derive: the result's figures use it, whose types the host
//! and its readers share.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

/// The schema of a `#[serde(flatten)]` `Option<T>` field (`schema_with`):
/// `T`'s fields, each optional, since the whole of `T` is left out when the
/// field is `None`. `T`'s own dependencies are inlined, so nothing it
/// refers to has to be listed elsewhere.
pub fn optional_fields<T: ToSchema>() -> Schema {
    let mut dependencies = Vec::new();
    T::schemas(&mut dependencies);
    let mut schema = serde_json::to_value(T::schema()).expect("a schema serializes");
    inline(&mut schema, &dependencies);
    if let Some(object) = schema.as_object_mut() {
        object.remove("required");
        let described = object.get("description").and_then(|d| d.as_str());
        let note = format!(
            "{} Left out as a whole when there is none.",
            described.unwrap_or("")
        );
        object.insert("description".into(), note.trim_start().into());
    }
    serde_json::from_value(schema).expect("a schema deserializes")
}

/// Replaces each `$ref` to one of `schemas` in `value` with the schema,
/// keeping what stands beside the `$ref` (its description).
fn inline(value: &mut serde_json::Value, schemas: &[(String, RefOr<Schema>)]) {
    let target = value
        .get("$ref")
        .and_then(|r| r.as_str())
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .and_then(|name| schemas.iter().find(|(known, _)| known == name));
    if let Some((_, schema)) = target {
        let mut inlined = serde_json::to_value(schema).expect("a schema serializes");
        if let (Some(inlined), Some(beside)) = (inlined.as_object_mut(), value.as_object()) {
            let beside = beside.iter().filter(|(key, _)| *key != "$ref");
            inlined.extend(beside.map(|(key, v)| (key.clone(), v.clone())));
        }
        *value = inlined;
        inline(value, schemas);
        return;
    }
    match value {
        serde_json::Value::Object(object) => object.values_mut().for_each(|v| inline(v, schemas)),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| inline(v, schemas)),
        _ => {}
    }
}
