//! Handler schemas embedded in the OpenAPI document. The runtime gives each schema as a
//! standalone JSON Schema document, the named types it uses in its own `$defs`; in the
//! OpenAPI document those move to `components/schemas` under names unique to the handler
//! and the schema, and the references to them are rewritten to match. Boolean schemas (a type
//! without a schema is `true`, any value) take their object forms, which OpenAPI tools read
//! more widely than the booleans JSON Schema allows.

use std::collections::HashMap;

use percent_encoding::percent_decode_str;
use serde_json::{Map, Value};

/// Where a standalone schema's references to its own definitions point.
const DEFS: &str = "#/$defs/";
/// Where the OpenAPI document's shared schemas are.
const COMPONENTS: &str = "#/components/schemas/";

/// Keywords whose values are data, not schemas: a `$ref` key inside them is not a reference.
const DATA_KEYWORDS: [&str; 5] = ["const", "default", "enum", "example", "examples"];

/// Keywords whose value is a schema. (`additionalProperties` is left out: tools read its
/// boolean form, which says whether other properties are allowed.)
const SCHEMA_KEYWORDS: [&str; 9] = [
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
];
/// Keywords whose value maps names to schemas.
const SCHEMA_MAP_KEYWORDS: [&str; 4] = [
    "properties",
    "patternProperties",
    "$defs",
    "dependentSchemas",
];
/// Keywords whose value is a list of schemas.
const SCHEMA_LIST_KEYWORDS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];

/// Moves the definitions of the standalone `schema` into `components` (the document's
/// `components/schemas`) under names starting with `prefix`, and returns the schema to
/// place in an operation, its references rewritten. A schema that refers to itself as a
/// whole (`#`) moves to the components too, and a reference to it is returned.
///
/// Names keep to the characters OpenAPI allows (`A-Z a-z 0-9 . - _`); a name already taken
/// gets a numeric suffix.
pub(super) fn embed(mut schema: Value, prefix: &str, components: &mut Map<String, Value>) -> Value {
    object_forms(&mut schema);
    let Value::Object(mut root) = schema else {
        unreachable!("a schema in its object form is an object");
    };
    root.remove("$schema");
    let definitions = match root.remove("$defs") {
        Some(Value::Object(definitions)) => definitions,
        _ => Map::new(),
    };
    let mut names = HashMap::new();
    for name in definitions.keys() {
        let key = unique_key(&format!("{prefix}{name}"), components, &names);
        names.insert(name.clone(), key);
    }
    let whole = refers_to_whole(&definitions) || refers_to_whole_in(&root);
    let root_key = whole.then(|| {
        let title = root.get("title").and_then(Value::as_str).unwrap_or("root");
        unique_key(&format!("{prefix}{title}"), components, &names)
    });
    let rewrite = |value: &mut Value| rewrite_refs(value, &names, root_key.as_deref());
    for (name, mut definition) in definitions {
        rewrite(&mut definition);
        components.insert(names[&name].clone(), definition);
    }
    let mut root = Value::Object(root);
    rewrite(&mut root);
    match root_key {
        Some(key) => {
            components.insert(key.clone(), root);
            reference(&key)
        }
        None => root,
    }
}

/// Replaces the boolean schemas in `schema` (itself included) by their object forms: `{}`
/// for `true`, `{"not": {}}` for `false`.
fn object_forms(schema: &mut Value) {
    match schema {
        Value::Bool(any) => {
            let mut object = Map::new();
            if !*any {
                object.insert("not".to_owned(), Value::Object(Map::new()));
            }
            *schema = Value::Object(object);
        }
        Value::Object(object) => {
            for (keyword, value) in object.iter_mut() {
                let keyword = keyword.as_str();
                if SCHEMA_KEYWORDS.contains(&keyword) {
                    object_forms(value);
                } else if SCHEMA_MAP_KEYWORDS.contains(&keyword) {
                    if let Value::Object(schemas) = value {
                        schemas.values_mut().for_each(object_forms);
                    }
                } else if SCHEMA_LIST_KEYWORDS.contains(&keyword) {
                    if let Value::Array(schemas) = value {
                        schemas.iter_mut().for_each(object_forms);
                    }
                } else if keyword == "additionalProperties" && value.is_object() {
                    object_forms(value);
                }
            }
        }
        // Not a schema: left for the validator to report.
        _ => {}
    }
}

/// `{"$ref": "#/components/schemas/<key>"}`.
fn reference(key: &str) -> Value {
    let mut schema = Map::new();
    schema.insert("$ref".to_owned(), format!("{COMPONENTS}{key}").into());
    Value::Object(schema)
}

/// `wanted` with the characters OpenAPI does not allow in a component name replaced, and a
/// suffix if the name is taken (in `components`, or by another definition being moved).
fn unique_key(
    wanted: &str,
    components: &Map<String, Value>,
    taken: &HashMap<String, String>,
) -> String {
    let base: String = wanted
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let free = |key: &str| !components.contains_key(key) && !taken.values().any(|t| t == key);
    if free(&base) {
        return base;
    }
    (2..)
        .map(|n| format!("{base}_{n}"))
        .find(|key| free(key))
        .expect("an unused name exists")
}

/// Whether some `$ref` in `definitions` is `#`, the whole standalone schema.
fn refers_to_whole(definitions: &Map<String, Value>) -> bool {
    definitions.values().any(|value| match value {
        Value::Object(object) => refers_to_whole_in(object),
        _ => false,
    })
}

fn refers_to_whole_in(object: &Map<String, Value>) -> bool {
    object
        .iter()
        .any(|(key, value)| match (key.as_str(), value) {
            ("$ref", Value::String(target)) => target == "#",
            (keyword, _) if DATA_KEYWORDS.contains(&keyword) => false,
            (_, Value::Object(inner)) => refers_to_whole_in(inner),
            (_, Value::Array(items)) => items.iter().any(|item| match item {
                Value::Object(inner) => refers_to_whole_in(inner),
                _ => false,
            }),
            _ => false,
        })
}

/// Rewrites every `$ref` under `value` that points into the standalone schema: `#/$defs/<name>`
/// (and paths below it) to the definition's component, `#` to the root's component.
fn rewrite_refs(value: &mut Value, names: &HashMap<String, String>, root: Option<&str>) {
    match value {
        Value::Object(object) => {
            for (key, inner) in object.iter_mut() {
                match (key.as_str(), &mut *inner) {
                    ("$ref", Value::String(target)) => {
                        if let Some(rewritten) = rewrite_ref(target, names, root) {
                            *target = rewritten;
                        }
                    }
                    (keyword, _) if DATA_KEYWORDS.contains(&keyword) => {}
                    _ => rewrite_refs(inner, names, root),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                rewrite_refs(item, names, root);
            }
        }
        _ => {}
    }
}

/// The rewritten form of the reference `target`, `None` to keep it as it is.
fn rewrite_ref(
    target: &str,
    names: &HashMap<String, String>,
    root: Option<&str>,
) -> Option<String> {
    if target == "#" {
        return root.map(|key| format!("{COMPONENTS}{key}"));
    }
    let pointer = target.strip_prefix(DEFS)?;
    let (segment, rest) = match pointer.find('/') {
        Some(at) => pointer.split_at(at),
        None => (pointer, ""),
    };
    // A reference is a JSON Pointer in a URI fragment: percent-decoded, then unescaped.
    let name = percent_decode_str(segment).decode_utf8().ok()?;
    let name = name.replace("~1", "/").replace("~0", "~");
    let key = names.get(&name)?;
    Some(format!("{COMPONENTS}{key}{rest}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn definitions_move_to_the_components_and_references_follow() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "add arguments",
            "type": "object",
            "properties": {
                "range": {"$ref": "#/$defs/Range"},
                "pair": {"$ref": "#/$defs/Pair%3Ci32%3E"},
                "deep": {"$ref": "#/$defs/Range/properties/low"},
                "data": {"const": {"$ref": "#/$defs/Range"}},
            },
            "$defs": {
                "Range": {"type": "object", "properties": {"low": {"type": "integer"}}},
                "Pair<i32>": {"type": "array", "items": {"$ref": "#/$defs/Range"}},
            },
        });
        let mut components = Map::new();
        components.insert("C_add_Range".to_owned(), json!(true)); // taken
        let embedded = embed(schema, "C_add_", &mut components);
        assert_eq!(embedded.get("$schema"), None);
        assert_eq!(embedded.get("$defs"), None);
        let properties = &embedded["properties"];
        assert_eq!(
            properties["range"]["$ref"],
            "#/components/schemas/C_add_Range_2"
        );
        assert_eq!(
            properties["pair"]["$ref"],
            "#/components/schemas/C_add_Pair_i32_"
        );
        assert_eq!(
            properties["deep"]["$ref"],
            "#/components/schemas/C_add_Range_2/properties/low"
        );
        // Data is left alone.
        assert_eq!(properties["data"]["const"]["$ref"], "#/$defs/Range");
        assert_eq!(
            components["C_add_Pair_i32_"]["items"]["$ref"],
            "#/components/schemas/C_add_Range_2"
        );
        assert_eq!(components["C_add_Range"], json!(true));
        assert_eq!(components.len(), 3);
    }

    #[test]
    fn a_schema_that_refers_to_itself_moves_whole() {
        let schema = json!({
            "title": "Tree",
            "type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
        });
        let mut components = Map::new();
        let embedded = embed(schema, "T_get_output_", &mut components);
        assert_eq!(
            embedded,
            json!({"$ref": "#/components/schemas/T_get_output_Tree"})
        );
        assert_eq!(
            components["T_get_output_Tree"]["properties"]["children"]["items"]["$ref"],
            "#/components/schemas/T_get_output_Tree"
        );
    }

    #[test]
    fn boolean_schemas_take_their_object_forms() {
        let mut components = Map::new();
        assert_eq!(embed(json!(true), "p_", &mut components), json!({}));
        assert_eq!(
            embed(json!(false), "p_", &mut components),
            json!({"not": {}})
        );
        let schema = json!({
            "type": "object",
            "properties": {"any": true, "list": {"type": "array", "items": true}},
            "anyOf": [true, {"$ref": "#/$defs/Free"}],
            "additionalProperties": false,
            "default": {"properties": {"kept": true}},
            "$defs": {"Free": true},
        });
        let embedded = embed(schema, "p_", &mut components);
        assert_eq!(
            embedded,
            json!({
                "type": "object",
                "properties": {"any": {}, "list": {"type": "array", "items": {}}},
                "anyOf": [{}, {"$ref": "#/components/schemas/p_Free"}],
                "additionalProperties": false,
                "default": {"properties": {"kept": true}},
            })
        );
        assert_eq!(components["p_Free"], json!({}));
    }
}
