//! Label and field selectors: parsing the query-string syntax and matching stored objects.
