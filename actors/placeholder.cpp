// Placeholder so the actors library exists before its first component lands.
namespace calserve::actors_placeholder { int anchor = 0; }
