-- What else an operation needs to say, as JSON text: for an image file its size and format, and
-- what the model had returned before writ resized or converted it. NULL for most operations.
ALTER TABLE operations ADD COLUMN detail TEXT;
