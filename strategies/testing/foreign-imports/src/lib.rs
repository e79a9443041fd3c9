//! Test fixture: a valid component that imports an interface the host does
//! not provide, which the host must refuse to load.

// wit-bindgen emits the unsafe glue of the bindings into this crate.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    inline: "
        package test:foreign;
        interface missing {
            tick: func() -> u64;
        }
        world needy {
            import missing;
            export hello: func() -> string;
        }
    ",
});

struct Needy;

impl Guest for Needy {
    fn hello() -> String {
        // Calling the import keeps it in the component's import list.
        test::foreign::missing::tick().to_string()
    }
}

export!(Needy);
