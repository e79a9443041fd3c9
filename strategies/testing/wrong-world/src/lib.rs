//! Test fixture: a valid component of another world (it exports `hello`, not
//! couponlab's `strategy`), which the host must refuse to load.

// wit-bindgen emits the unsafe glue of the bindings into this crate.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    inline: "
        package test:wrong;
        world greeter {
            export hello: func() -> string;
        }
    ",
});

struct Greeter;

impl Guest for Greeter {
    fn hello() -> String {
        "hello".into()
    }
}

export!(Greeter);
